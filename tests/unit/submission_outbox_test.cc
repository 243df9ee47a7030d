// client/submission_outbox: libcollective's side of the submission ring,
// over a small ring in ordinary memory, read by the daemon's own reader.
// Releases race a push that waits for room: every released id must reach
// the daemon exactly once, whichever message carries it.
#include "client/submission_outbox.h"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "shm/segment_layout.h"
#include "shm/submission_ring.h"

namespace collective::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint64_t kRingBytes = 1024;
constexpr auto kTimeout = std::chrono::seconds(10);

// A client core in miniature: its mutex, an outbox on a small ring, and the
// daemon's reader of that ring. The outbox's wait for room blocks until the
// test drains the ring (or, while `refuse_waits`, fails at once).
class SubmissionOutboxTest : public ::testing::Test {
 protected:
  SubmissionOutboxTest()
      : outbox_(shm::SubmissionWriter(&header_, ring_, kRingBytes, &doorbell_),
                /*release_bytes=*/1 << 30,
                [this](std::unique_lock<std::mutex>& lock) { return WaitForRoom(lock); }),
        reader_(&header_, ring_, kRingBytes) {}

  absl::Status WaitForRoom(std::unique_lock<std::mutex>& lock) {
    if (refuse_waits_) return absl::ResourceExhaustedError("the ring is full");
    ++waiting_;
    changed_.notify_all();
    const int drained = drains_;
    // Lets go of the core's mutex while it waits, as the real wait does.
    const bool woke = changed_.wait_for(lock, kTimeout, [&] { return drains_ != drained; });
    --waiting_;
    return woke ? absl::OkStatus() : absl::DeadlineExceededError("the test never drained");
  }

  // Pushes messages of one request each until the ring is full.
  void FillRing() {
    std::unique_lock lock(mutex_);
    refuse_waits_ = true;
    for (int i = 0; i < 1000; ++i) {
      v1::ClientMessage message;
      v1::TensorRequest* request = message.mutable_submit()->add_requests();
      request->set_request_id(1000 + i);
      request->set_name(std::string(40, 'f'));
      if (!outbox_.Push(message, lock).ok()) break;
    }
    refuse_waits_ = false;
  }

  // Submits request `request_id` on a thread of its own, which waits for
  // room while the ring is full.
  std::thread SubmitOnAThread(uint64_t request_id) {
    return std::thread([this, request_id] {
      std::unique_lock lock(mutex_);
      v1::ClientMessage message;
      message.mutable_submit()->add_requests()->set_request_id(request_id);
      EXPECT_TRUE(outbox_.Push(message, lock).ok());
    });
  }

  // Waits until `count` threads wait for room.
  bool AwaitWaiting(int count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kTimeout, [&] { return waiting_ == count; });
  }

  // The daemon's side: reads everything published, counting released ids.
  void Drain() {
    std::lock_guard lock(mutex_);
    std::string payload;
    while (true) {
      const absl::StatusOr<bool> next = reader_.Next(&payload);
      ASSERT_TRUE(next.ok()) << next.status();
      if (!*next) break;
      v1::ClientMessage message;
      ASSERT_TRUE(message.ParseFromString(payload));
      for (uint64_t id : message.released()) ++released_[id];
      for (const v1::TensorRequest& request : message.submit().requests()) {
        submitted_.push_back(request.request_id());
      }
    }
    ++drains_;
    changed_.notify_all();
  }

  void Release(uint64_t id) {
    std::unique_lock lock(mutex_);
    ASSERT_TRUE(outbox_.Release(id, 16, std::nullopt, lock).ok());
  }

  // Pushes an empty message: it carries whatever releases are queued.
  void Flush() {
    std::unique_lock lock(mutex_);
    v1::ClientMessage message;
    ASSERT_TRUE(outbox_.Push(message, lock).ok());
  }

  // Ids released other than exactly once, as id -> times.
  std::map<uint64_t, int> NotOnce(const std::vector<uint64_t>& ids) const {
    std::map<uint64_t, int> wrong;
    for (uint64_t id : ids) {
      const auto it = released_.find(id);
      const int times = it == released_.end() ? 0 : it->second;
      if (times != 1) wrong[id] = times;
    }
    for (const auto& [id, times] : released_) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) wrong[id] = times;
    }
    return wrong;
  }

  alignas(shm::kDataAlignment) shm::ClientSegmentHeader header_{};
  alignas(shm::kSubmitAlignment) std::byte ring_[kRingBytes]{};
  std::atomic<uint32_t> doorbell_{0};
  std::mutex mutex_;
  std::condition_variable changed_;
  bool refuse_waits_ = false;
  int waiting_ = 0;
  int drains_ = 0;
  SubmissionOutbox outbox_;
  shm::SubmissionReader reader_;
  std::map<uint64_t, int> released_;
  std::vector<uint64_t> submitted_;
};

// A submission waits for room, and meanwhile a result is released: that
// release must not be dropped when the submission finally goes out.
TEST_F(SubmissionOutboxTest, AReleaseQueuedWhileASubmissionWaitsIsPublished) {
  ASSERT_NO_FATAL_FAILURE(FillRing());
  Release(1);
  std::thread submitter = SubmitOnAThread(7);
  ASSERT_TRUE(AwaitWaiting(1)) << "the submission did not wait for room";
  Release(2);
  ASSERT_NO_FATAL_FAILURE(Drain());
  submitter.join();
  ASSERT_NO_FATAL_FAILURE(Flush());
  ASSERT_NO_FATAL_FAILURE(Drain());
  EXPECT_EQ(submitted_.back(), 7u);
  EXPECT_THAT(NotOnce({1, 2}), IsEmpty()) << "released ids not published exactly once";
}

// A submission that carries queued releases waits for room; meanwhile
// enough releases queue that they go on their own, and wait too. No id may
// travel in both messages.
TEST_F(SubmissionOutboxTest, ABatchOfReleasesRacingAWaitingSubmissionRepeatsNoId) {
  ASSERT_NO_FATAL_FAILURE(FillRing());
  std::vector<uint64_t> ids = {1, 2, 3};
  for (uint64_t id : ids) Release(id);
  std::thread submitter = SubmitOnAThread(7);
  ASSERT_TRUE(AwaitWaiting(1)) << "the submission did not wait for room";
  // Queued one by one until the queue goes on its own, which waits as well.
  std::thread releaser([&] {
    std::unique_lock lock(mutex_);
    for (uint64_t id = 100; id < 100 + SubmissionOutbox::kReleaseBatch; ++id) {
      EXPECT_TRUE(outbox_.Release(id, 16, std::nullopt, lock).ok());
    }
  });
  for (uint64_t id = 100; id < 100 + SubmissionOutbox::kReleaseBatch; ++id) ids.push_back(id);
  ASSERT_TRUE(AwaitWaiting(2)) << "the batch of releases did not wait for room";
  ASSERT_NO_FATAL_FAILURE(Drain());
  submitter.join();
  releaser.join();
  ASSERT_NO_FATAL_FAILURE(Flush());
  ASSERT_NO_FATAL_FAILURE(Drain());
  EXPECT_THAT(NotOnce(ids), IsEmpty()) << "released ids not published exactly once";
}

// Releases ride with the next message, and go on their own at a batch.
TEST_F(SubmissionOutboxTest, ReleasesRideAlongAndGoAloneAtABatch) {
  Release(5);
  {
    std::unique_lock lock(mutex_);
    v1::ClientMessage message;
    message.mutable_submit()->add_requests()->set_request_id(9);
    ASSERT_TRUE(outbox_.Push(message, lock).ok());
  }
  ASSERT_NO_FATAL_FAILURE(Drain());
  EXPECT_THAT(submitted_, ElementsAre(9u));
  EXPECT_THAT(NotOnce({5}), IsEmpty());
  std::vector<uint64_t> ids = {5};
  for (uint64_t id = 10; id < 10 + SubmissionOutbox::kReleaseBatch; ++id) {
    ids.push_back(id);
    Release(id);
  }
  ASSERT_NO_FATAL_FAILURE(Drain());
  EXPECT_THAT(NotOnce(ids), IsEmpty()) << "a full batch was not published on its own";
}

}  // namespace
}  // namespace collective::internal
