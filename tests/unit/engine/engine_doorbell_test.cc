// The engine's two ways to sleep, driven as the engine and a client drive
// them: the engine thread arms and sleeps, the client publishes and rings
// through its own SubmissionWriter (and its own mapping of the doorbell).
// Sleeps get deadlines and doorbell slices of an hour, so a Sleep that
// returns was woken; a test that fails does so at its own deadline.
#include "daemon/engine/engine_doorbell.h"

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "shm/client_segment.h"
#include "shm/doorbell_segment.h"
#include "shm/submission_ring.h"

namespace collective::daemon::engine {
namespace {

using namespace std::chrono_literals;

constexpr auto kHour = std::chrono::hours(1);
constexpr auto kTestDeadline = 30s;

std::string UniqueName(const std::string& what) {
  static int counter = 0;
  return absl::StrCat("collective-doorbell-test-", ::getpid(), "-", what, "-", counter++);
}

class EngineDoorbellTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto segment = shm::ClientSegment::Create({.name = UniqueName("client"),
                                               .arena_bytes = 4096,
                                               .ring_capacity = 16,
                                               .epoch = 9,
                                               .client_id = 1,
                                               .client_pid = ::getpid(),
                                               .owner_uid = ::geteuid(),
                                               .owner_gid = ::getegid()});
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = std::move(*segment);
    auto doorbell = job::JobDoorbell::Create(
        {.name = UniqueName("doorbell"), .epoch = 9, .owner_uid = ::geteuid(), .mode = 0600});
    ASSERT_TRUE(doorbell.ok()) << doorbell.status();
    doorbell_ = std::move(*doorbell);
    auto mapped = shm::DoorbellSegment::Open(doorbell_->segment().name(),
                                             shm::DoorbellSegment::kSegmentBytes, 9);
    ASSERT_TRUE(mapped.ok()) << mapped.status();
    client_doorbell_ = std::move(*mapped);
    writer_ =
        std::make_unique<shm::SubmissionWriter>(segment_->header(), segment_->submit_ring(),
                                                segment_->submit_bytes(), client_doorbell_->word());
  }

  shm::ClientSegmentHeader* header() { return segment_->header(); }

  // The engine's sleep, on a thread of its own (the test armed it).
  std::future<void> SleepOnThread(EngineDoorbell& doorbell) {
    return std::async(std::launch::async, [this, &doorbell] {
      doorbell.Sleep(std::chrono::steady_clock::now() + kHour);
    });
  }

  // Waits until the engine announced how it sleeps to this client.
  bool AnnouncedSleep(uint32_t how) {
    const auto deadline = std::chrono::steady_clock::now() + kTestDeadline;
    while (header()->daemon_sleeping.load() != how) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  void Publish() {
    const std::string payload = "work";
    ASSERT_TRUE(writer_->TryPush(payload.data(), payload.size()));
    writer_->Ring();
  }

  std::unique_ptr<shm::ClientSegment> segment_;
  std::shared_ptr<job::JobDoorbell> doorbell_;
  std::unique_ptr<shm::DoorbellSegment> client_doorbell_;
  std::unique_ptr<shm::SubmissionWriter> writer_;
};

TEST_F(EngineDoorbellTest, ClientRingWakesADoorbellSleep) {
  EngineDoorbell doorbell(config::EngineWait::kDoorbell, kHour);
  doorbell.Arm({header()}, {doorbell_});
  std::future<void> sleep = SleepOnThread(doorbell);
  ASSERT_TRUE(AnnouncedSleep(shm::kDaemonSleepsOnDoorbell));
  Publish();
  ASSERT_EQ(sleep.wait_for(kTestDeadline), std::future_status::ready)
      << "the ring did not reach the engine sleeping on the doorbell";
  EXPECT_TRUE(doorbell.slept_on_doorbell());
  EXPECT_EQ(header()->daemon_sleeping.load(), shm::kDaemonAwake);
}

TEST_F(EngineDoorbellTest, PostFromAnotherThreadWakesADoorbellSleep) {
  EngineDoorbell doorbell(config::EngineWait::kDoorbell, kHour);
  doorbell.Arm({header()}, {doorbell_});
  std::future<void> sleep = SleepOnThread(doorbell);
  ASSERT_TRUE(AnnouncedSleep(shm::kDaemonSleepsOnDoorbell));
  doorbell.Ring();
  EXPECT_EQ(sleep.wait_for(kTestDeadline), std::future_status::ready);
}

// Published after the engine looked but before it announced its sleep: the
// client saw it awake and rang nothing, so only the re-check finds it.
TEST_F(EngineDoorbellTest, SubmissionBetweenArmAndSleepIsNotMissed) {
  for (const config::EngineWait wait : {config::EngineWait::kDoorbell, config::EngineWait::kAuto}) {
    EngineDoorbell doorbell(wait, kHour);
    doorbell.Arm({header()}, {doorbell_});
    Publish();
    std::future<void> sleep = SleepOnThread(doorbell);
    EXPECT_EQ(sleep.wait_for(kTestDeadline), std::future_status::ready);
  }
}

TEST_F(EngineDoorbellTest, AutoSleepsOnEveryClientsWordWhereTheKernelHasFutexWaitv) {
  if (!shm::FutexWaitvAvailable()) GTEST_SKIP() << "this kernel lacks futex_waitv";
  EngineDoorbell doorbell(config::EngineWait::kAuto, kHour);
  doorbell.Arm({header()}, {doorbell_});
  std::future<void> sleep = SleepOnThread(doorbell);
  ASSERT_TRUE(AnnouncedSleep(shm::kDaemonSleepsOnSubmitWord));
  Publish();
  ASSERT_EQ(sleep.wait_for(kTestDeadline), std::future_status::ready);
  EXPECT_FALSE(doorbell.slept_on_doorbell());
  EXPECT_EQ(client_doorbell_->word()->load(), 0u) << "the client rang its own word only";
}

// One futex_waitv takes 128 words: with more clients (plus the engine's own
// word) the engine sleeps on the doorbell, which still hears all of them.
TEST_F(EngineDoorbellTest, MoreClientsThanFutexWaitvTakesSleepOnTheDoorbell) {
  std::vector<shm::ClientSegmentHeader> others(shm::kMaxFutexWaiters);
  std::vector<shm::ClientSegmentHeader*> clients = {header()};
  for (shm::ClientSegmentHeader& other : others) clients.push_back(&other);
  EngineDoorbell doorbell(config::EngineWait::kAuto, kHour);
  doorbell.Arm(clients, {doorbell_});
  std::future<void> sleep = SleepOnThread(doorbell);
  ASSERT_TRUE(AnnouncedSleep(shm::kDaemonSleepsOnDoorbell));
  Publish();
  ASSERT_EQ(sleep.wait_for(kTestDeadline), std::future_status::ready);
  EXPECT_TRUE(doorbell.slept_on_doorbell());
  for (const shm::ClientSegmentHeader& other : others) {
    EXPECT_EQ(other.daemon_sleeping.load(), shm::kDaemonAwake);
  }
}

// A client may store anything into the doorbell word; the engine then sleeps
// at most one slice, so another client's ring is late, never lost.
TEST_F(EngineDoorbellTest, ADoorbellSleepLastsAtMostOneSlice) {
  EngineDoorbell doorbell(config::EngineWait::kDoorbell, 1ms);
  doorbell.Arm({header()}, {doorbell_});
  std::future<void> sleep = SleepOnThread(doorbell);
  EXPECT_EQ(sleep.wait_for(kTestDeadline), std::future_status::ready);
}

// Several jobs: one futex sleeps on one word, the first job's doorbell, so
// a client of another job rings a word nobody waits on; the engine's sleep
// lasts at most kSharedSlice, and it then finds that client's submission.
TEST_F(EngineDoorbellTest, WithSeveralJobsAnotherJobsRingIsLateAtMostASharedSlice) {
  auto first = job::JobDoorbell::Create(
      {.name = UniqueName("first-job"), .epoch = 9, .owner_uid = ::geteuid(), .mode = 0600});
  ASSERT_TRUE(first.ok()) << first.status();
  EngineDoorbell doorbell(config::EngineWait::kDoorbell, kHour);
  doorbell.Arm({header()}, {std::move(*first), doorbell_});
  std::future<void> sleep = SleepOnThread(doorbell);
  // The engine announces its sleep, or has already slept its slice out when
  // this thread was not scheduled within it (a loaded machine): either way
  // the sleep ends without a ring on the word it waits on.
  const auto deadline = std::chrono::steady_clock::now() + kTestDeadline;
  while (header()->daemon_sleeping.load() != shm::kDaemonSleepsOnDoorbell &&
         sleep.wait_for(0s) != std::future_status::ready) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the engine never slept";
    std::this_thread::yield();
  }
  Publish();  // rings this client's own job's doorbell, the second
  ASSERT_EQ(sleep.wait_for(kTestDeadline), std::future_status::ready)
      << "a ring on the second job's doorbell was never noticed";
  EXPECT_TRUE(doorbell.slept_on_doorbell());
}

}  // namespace
}  // namespace collective::daemon::engine
