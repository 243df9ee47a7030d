// The harness of the engine's unit tests: an Engine driven directly, with
// fake Register calls and session links (job/session_link.h) and the real
// shared-memory segments (submissions through the submission ring, answers
// through the completion ring), and the clients of a job as the tests see
// them.
#pragma once

#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "daemon/engine/engine.h"
#include "shm/client_segment.h"
#include "shm/completion_ring.h"
#include "shm/doorbell_segment.h"
#include "shm/result_segment.h"
#include "shm/segment_layout.h"
#include "shm/segment_names.h"
#include "shm/submission_ring.h"

namespace collective::daemon::engine {

using Ranks = std::vector<int32_t>;

inline constexpr auto kTimeout = std::chrono::seconds(10);

inline job::PeerCredentials Self() { return {::getpid(), ::geteuid(), ::getegid()}; }

class FakeRegisterCall final : public job::RegisterCall {
 public:
  // `peer`: who the daemon sees on the other end (this process by default).
  FakeRegisterCall(uint64_t id, v1::RegisterRequest request, job::PeerCredentials peer = Self())
      : id_(id), request_(std::move(request)), peer_(peer) {}

  uint64_t id() const override { return id_; }
  const v1::RegisterRequest& request() const override { return request_; }
  const job::PeerCredentials& peer() const override { return peer_; }
  void Finish(const absl::Status& status, const v1::RegisterResponse& response) override {
    std::lock_guard lock(mutex_);
    ++finishes_;
    status_ = status;
    if (status.ok()) response_ = response;
    done_.notify_all();
  }

  // The status Finish gave, or nullopt if it has not been called in time.
  std::optional<absl::Status> Await(std::chrono::milliseconds timeout = kTimeout) {
    std::unique_lock lock(mutex_);
    if (!done_.wait_for(lock, timeout, [this] { return finishes_ > 0; })) return std::nullopt;
    return status_;
  }
  v1::RegisterResponse response() {
    std::lock_guard lock(mutex_);
    return response_;
  }
  int finishes() {
    std::lock_guard lock(mutex_);
    return finishes_;
  }

 private:
  const uint64_t id_;
  const v1::RegisterRequest request_;
  const job::PeerCredentials peer_;
  std::mutex mutex_;
  std::condition_variable done_;
  int finishes_ = 0;
  absl::Status status_;
  v1::RegisterResponse response_;
};

class FakeSessionLink final : public job::SessionLink {
 public:
  void Send(v1::DaemonMessage message) override {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    messages_.push_back(std::move(message));
    changed_.notify_all();
  }
  void Close(const absl::Status& status) override {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    closed_ = status;
    changed_.notify_all();
  }

  // The next message of `kind` (others are skipped), or nullopt.
  std::optional<v1::DaemonMessage> NextOf(v1::DaemonMessage::BodyCase kind) {
    std::unique_lock lock(mutex_);
    while (true) {
      if (!changed_.wait_for(lock, kTimeout, [this] { return !messages_.empty(); })) {
        return std::nullopt;
      }
      v1::DaemonMessage message = std::move(messages_.front());
      messages_.pop_front();
      if (message.body_case() == kind) return message;
    }
  }
  std::optional<absl::Status> AwaitClosed() {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, kTimeout, [this] { return closed_.has_value(); });
    return closed_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<v1::DaemonMessage> messages_;
  std::optional<absl::Status> closed_;
};

// A registered client as the test sees it: its call, segments and link.
struct TestClient {
  std::shared_ptr<FakeRegisterCall> call;
  std::shared_ptr<FakeSessionLink> link;
  std::unique_ptr<shm::ClientSegment> segment;
  std::unique_ptr<shm::ResultSegment> results;
  std::unique_ptr<shm::DoorbellSegment> doorbell;
  std::unique_ptr<shm::RingConsumer> ring;
  std::unique_ptr<shm::SubmissionWriter> submissions;

  // The next record with its text (a failure's message).
  std::optional<shm::Completion> NextCompletion() {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      const uint32_t word = ring->WakeWord();
      if (auto completion = ring->TryPop()) return completion;
      ring->BeginSleep();
      ring->Sleep(word, deadline - absl::Now());
      ring->EndSleep();
    }
    return ring->TryPop();
  }
  std::optional<shm::CompletionRecord> NextRecord() {
    std::optional<shm::Completion> completion = NextCompletion();
    if (!completion.has_value()) return std::nullopt;
    return completion->record;
  }
};

class EngineHarness : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.socket = absl::StrCat(
        "/tmp/engine-test-", ::getpid(), "-", ::testing::UnitTest::GetInstance()->random_seed(),
        "-", ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".sock");
    config_.register_timeout_seconds = 10;
    config_.max_outstanding_requests = 8;
    config_.default_arena_bytes = 64 << 10;
    config_.max_arena_bytes = 1 << 20;
    config_.result_arena_bytes = 1 << 20;
    config_.fusion_threshold_bytes = 64 << 10;
    config_.reduce_threads = 1;
  }

  void TearDown() override {
    engine_.reset();
    for (const std::string& segment : Segments()) ADD_FAILURE() << "left behind: " << segment;
  }

  void Start(std::unique_ptr<gpu::DeviceBackend> devices = gpu::CreateDeviceBackend()) {
    engine_ = std::make_unique<engine::Engine>(config_, kEpoch, /*metrics_url=*/"",
                                               /*stop=*/nullptr, std::move(devices));
    ASSERT_TRUE(engine_->Start().ok());
  }

  std::vector<std::string> Segments() const {
    const std::string prefix = shm::SegmentNames(::geteuid(), config_.socket, 0).prefix();
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) == 0) found.push_back(name);
    }
    return found;
  }

  std::shared_ptr<FakeRegisterCall> Register(int32_t local_rank, int32_t local_size,
                                             const std::string& job_id = "",
                                             const std::vector<Ranks>& static_sets = {},
                                             pid_t peer_pid = ::getpid()) {
    v1::RegisterRequest request;
    request.set_job_id(job_id);
    for (const Ranks& ranks : static_sets) {
      v1::ProcessSet* set = request.add_static_process_sets();
      for (int32_t rank : ranks) set->add_ranks(rank);
    }
    request.set_local_rank(local_rank);
    request.set_local_size(local_size);
    request.set_pid(::getpid());
    request.set_layout_version(shm::kLayoutVersion);
    auto call = std::make_shared<FakeRegisterCall>(
        next_call_id_++, request, job::PeerCredentials{peer_pid, ::geteuid(), ::getegid()});
    EXPECT_TRUE(engine_->Post(engine::RegisterEvent{call}));
    return call;
  }

  v1::StatusResponse Status() {
    auto promise = std::make_shared<std::promise<v1::StatusResponse>>();
    auto future = promise->get_future();
    EXPECT_TRUE(engine_->Post(engine::StatusEvent{
        [promise](const v1::StatusResponse& status) { promise->set_value(status); }}));
    EXPECT_EQ(future.wait_for(kTimeout), std::future_status::ready);
    return future.get();
  }

  void Post(const std::shared_ptr<FakeSessionLink>& link, v1::ClientMessage message) {
    ASSERT_TRUE(engine_->Post(engine::ClientMessageEvent{link, Self(), std::move(message)}));
  }

  // Registers every rank of job `job_id` of `local_size` (asking for
  // `static_sets`), maps the segments and (if `attach`) attaches every
  // session.
  std::vector<TestClient> JoinJob(int32_t local_size, bool attach = true,
                                  const std::vector<Ranks>& static_sets = {},
                                  const std::string& job_id = "") {
    std::vector<TestClient> clients(local_size);
    for (int32_t rank = 0; rank < local_size; ++rank)
      clients[rank].call = Register(rank, local_size, job_id, static_sets);
    for (TestClient& client : clients) {
      const auto status = client.call->Await();
      EXPECT_TRUE(status.has_value() && status->ok()) << (status ? status->ToString() : "none");
      const v1::RegisterResponse response = client.call->response();
      auto segment =
          shm::ClientSegment::Open(response.arena().name(), response.arena().size_bytes(),
                                   response.epoch(), response.client_id());
      EXPECT_TRUE(segment.ok()) << segment.status();
      auto results = shm::ResultSegment::OpenReadOnly(
          response.results().name(), response.results().size_bytes(), response.epoch());
      EXPECT_TRUE(results.ok()) << results.status();
      auto doorbell = shm::DoorbellSegment::Open(
          response.doorbell().name(), response.doorbell().size_bytes(), response.epoch());
      EXPECT_TRUE(doorbell.ok()) << doorbell.status();
      if (!segment.ok() || !results.ok() || !doorbell.ok()) return {};
      client.segment = std::move(*segment);
      client.results = std::move(*results);
      client.doorbell = std::move(*doorbell);
      client.ring = std::make_unique<shm::RingConsumer>(*client.segment);
      client.submissions = std::make_unique<shm::SubmissionWriter>(
          client.segment->header(), client.segment->submit_ring(), client.segment->submit_bytes(),
          client.doorbell->word());
      client.link = std::make_shared<FakeSessionLink>();
      if (attach) Attach(client);
    }
    return clients;
  }

  void Attach(TestClient& client) {
    v1::ClientMessage message;
    message.mutable_attach()->set_client_id(client.call->response().client_id());
    message.mutable_attach()->set_session_token(client.call->response().session_token());
    Post(client.link, message);
    const auto attached = client.link->NextOf(v1::DaemonMessage::kAttached);
    ASSERT_TRUE(attached.has_value());
    EXPECT_EQ(attached->attached().client_id(), client.call->response().client_id());
  }

  // Publishes `message` in the client's submission ring, as libcollective
  // does, and returns once the engine has read it (so that what the test
  // posts next is handled after it).
  void Push(TestClient& client, const v1::ClientMessage& message) {
    const std::string payload = message.SerializeAsString();
    ASSERT_TRUE(client.submissions->TryPush(payload.data(), payload.size()))
        << "the submission ring is full";
    client.submissions->Ring();
    const shm::ClientSegmentHeader* header = client.segment->header();
    const uint64_t head = header->submit_head.load();
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (header->submit_tail.load() != head) {
      ASSERT_LT(absl::Now(), deadline) << "the engine did not read the submission ring";
      std::this_thread::yield();
    }
  }

  // Submits `request` (whose data, if any, the caller put in the arena).
  void Send(TestClient& client, const v1::TensorRequest& request) {
    v1::ClientMessage message;
    *message.mutable_submit()->add_requests() = request;
    Push(client, message);
  }

  // Releases the result of `request_id`.
  void Release(TestClient& client, uint64_t request_id) {
    v1::ClientMessage message;
    message.add_released(request_id);
    Push(client, message);
  }

  // A float32 sum allreduce of 4 elements at arena offset 0, of process
  // set `set`.
  static v1::TensorRequest Allreduce(uint64_t request_id, const std::string& name,
                                     int32_t set = 0) {
    v1::TensorRequest request;
    request.set_request_id(request_id);
    request.set_name(name);
    request.set_collective(v1::COLLECTIVE_ALLREDUCE);
    request.set_op(v1::REDUCE_OP_SUM);
    request.set_dtype(v1::DATA_TYPE_FLOAT32);
    request.add_shape(4);
    request.set_length(16);
    request.set_process_set_id(set);
    return request;
  }

  static constexpr uint64_t kEpoch = 0x5eed;
  config::DaemonConfig config_;
  std::unique_ptr<engine::Engine> engine_;
  uint64_t next_call_id_ = 1;
};

}  // namespace collective::daemon::engine
