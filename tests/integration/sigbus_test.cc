// A client that truncates a segment under the daemon (it owns the files, so
// it can) must not crash collectived: the daemon's SIGBUS guard
// (daemon/sigbus_guard.h) maps zero pages over the vanished mapping, the
// allreduce that touched it fails with DATA_LOSS naming the truncation, the
// job fails for every rank, and the next job runs normally.
#include <ostream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_client.h"

namespace collective::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kCount = 4096;

// Truncates the client's segment to zero bytes, as a hostile client would.
// The caller's own mapping of it is unusable afterwards.
void Truncate(RawClient& client) {
  const std::string name = "/" + client.registration().arena().name();
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0) << "shm_open " << name;
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ::close(fd);
}

struct Scenario {
  int local_size;
  // Whether the clients ran a collective before the truncation, so that the
  // daemon has read the truncated client's ring and arena before.
  bool ring_used;

  friend void PrintTo(const Scenario& s, std::ostream* os) {
    *os << s.local_size << " ranks" << (s.ring_used ? ", ring used" : "");
  }
};

// A daemon of its own per test; checked and stopped at the end whatever
// happened, so that a crash leaves nothing behind.
class TruncationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start(
        {.flags = {"--fusion-threshold-bytes", "1MiB", "--result-arena-bytes", "4MiB"}});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
  }
  void TearDown() override {
    if (daemon_ != nullptr) {
      EXPECT_EQ(StopAndCheck(*daemon_), "");
    }
  }

  std::unique_ptr<DaemonProcess> daemon_;
};

class SigbusTest : public TruncationTest, public ::testing::WithParamInterface<Scenario> {};

TEST_P(SigbusTest, TruncatedSegmentFailsTheJobForEveryRankAndTheDaemonSurvives) {
  const int local_size = GetParam().local_size;
  DaemonProcess* daemon = daemon_.get();
  auto clients = RawClient::JoinJob(daemon->socket(), local_size);
  ASSERT_TRUE(clients.ok()) << clients.status();

  if (GetParam().ring_used) {
    std::vector<RawClient*> raw;
    for (auto& client : *clients) raw.push_back(client.get());
    ASSERT_EQ(CheckAllreduce(raw, 100, "before"), "");
  }
  for (auto& client : *clients) {
    auto* input = reinterpret_cast<float*>(client->segment().arena());
    for (int64_t i = 0; i < kCount; ++i) input[i] = 1.0f;
  }
  ASSERT_NO_FATAL_FAILURE(Truncate(*(*clients)[0]));
  // The truncating rank's rings went with its pages: it cannot submit (the
  // daemon reads its ring all the same, and finds the truncation there).
  for (auto& client : *clients) {
    if (client->rank() == 0) continue;
    ASSERT_TRUE(client->Submit({FloatAllreduce(1, "victim", 0, kCount)}))
        << "rank " << client->rank();
  }

  const std::string truncated =
      "rank 0 (pid " + std::to_string(::getpid()) + ") truncated its shared-memory segment";
  for (auto& client : *clients) {
    SCOPED_TRACE(::testing::Message() << "rank " << client->rank());
    if (client->rank() == 0) {
      // The daemon ends the truncating client's session, saying why.
      const auto end = client->session().AwaitEnd();
      ASSERT_TRUE(end.ok()) << "the daemon did not end the truncating client's session";
      EXPECT_EQ(end->error_code(), grpc::StatusCode::DATA_LOSS);
      EXPECT_THAT(end->error_message(), HasSubstr(truncated));
      continue;
    }
    const auto failed = client->NextCompletion();
    ASSERT_TRUE(failed.has_value()) << "no completion record";
    EXPECT_EQ(failed->record.request_id, 1u);
    EXPECT_EQ(failed->record.status_code, static_cast<int32_t>(absl::StatusCode::kDataLoss));
    EXPECT_THAT(failed->text, HasSubstr(truncated));
    const auto job_failed = client->session().NextOf(v1::DaemonMessage::kJobFailed);
    ASSERT_TRUE(job_failed.has_value()) << "no job_failed message";
    EXPECT_EQ(job_failed->job_failed().code(), static_cast<int>(absl::StatusCode::kDataLoss));
    EXPECT_THAT(job_failed->job_failed().message(), HasSubstr(truncated));
  }
  auto status = daemon->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  // Failed, or already gone if the daemon ended the only client's session.
  if (status->job().state() != v1::JOB_STATE_IDLE || local_size > 1) {
    EXPECT_EQ(status->job().state(), v1::JOB_STATE_FAILED);
    EXPECT_THAT(status->job().failure(), HasSubstr(truncated));
  }

  // Later requests of the failed job fail with the same reason.
  if (local_size > 1) {
    RawClient& other = *(*clients)[1];
    ASSERT_TRUE(other.Submit({FloatAllreduce(2, "later", 0, 4)}));
    const auto failed = other.NextCompletion();
    ASSERT_TRUE(failed.has_value());
    EXPECT_EQ(failed->record.status_code, static_cast<int32_t>(absl::StatusCode::kDataLoss));
    EXPECT_THAT(failed->text, HasSubstr(truncated));
  }

  for (auto& client : *clients) {
    // The truncating rank's session may have been ended by the daemon.
    const absl::Status left = client->Leave();
    if (client->rank() != 0) {
      EXPECT_TRUE(left.ok()) << left;
    }
  }
  clients->clear();
  ASSERT_TRUE(
      daemon
          ->AwaitStatus(
              [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; },
              absl::Seconds(10))
          .ok());

  // A new job on the same daemon works.
  auto next = RawClient::JoinJob(daemon->socket(), local_size);
  ASSERT_TRUE(next.ok()) << next.status();
  std::vector<RawClient*> raw;
  for (auto& client : *next) raw.push_back(client.get());
  EXPECT_EQ(CheckAllreduce(raw, 1, "after"), "");
  for (auto& client : *next) EXPECT_TRUE(client->Leave().ok());
  next->clear();
}

INSTANTIATE_TEST_SUITE_P(Scenarios, SigbusTest,
                         ::testing::Values(Scenario{1, false}, Scenario{2, false},
                                           Scenario{1, true}, Scenario{2, true}),
                         [](const auto& param_info) {
                           return std::to_string(param_info.param.local_size) + "Ranks" +
                                  (param_info.param.ring_used ? "AfterRingUse" : "");
                         });

// The job's result segment belongs to the clients' uid too (mode 0400, but
// its owner may chmod it): truncating it must not crash the daemon when it
// writes the next result there.
TEST_F(TruncationTest, TruncatedResultSegmentFailsTheJobAndTheDaemonSurvives) {
  auto clients = RawClient::JoinJob(daemon_->socket(), 2);
  ASSERT_TRUE(clients.ok()) << clients.status();
  std::vector<RawClient*> raw;
  for (auto& client : *clients) raw.push_back(client.get());
  ASSERT_EQ(CheckAllreduce(raw, 1, "before"), "");

  const std::string name = "/" + (*clients)[0]->registration().results().name();
  const int read_only = ::shm_open(name.c_str(), O_RDONLY, 0);
  ASSERT_GE(read_only, 0) << "shm_open " << name;
  ASSERT_EQ(::fchmod(read_only, 0600), 0) << "the owner may chmod";
  ::close(read_only);
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ::close(fd);

  for (RawClient* client : raw) {
    ASSERT_TRUE(client->Submit({FloatAllreduce(2, "victim", 0, kCount)}));
  }
  for (RawClient* client : raw) {
    SCOPED_TRACE(::testing::Message() << "rank " << client->rank());
    const auto failed = client->NextCompletion();
    ASSERT_TRUE(failed.has_value()) << client->session().DescribeEnd();
    EXPECT_EQ(failed->record.status_code, static_cast<int32_t>(absl::StatusCode::kDataLoss));
    EXPECT_THAT(failed->text, HasSubstr("truncated"));
  }
  auto status = daemon_->Status();
  ASSERT_TRUE(status.ok()) << "collectived died: " << status.status();
  EXPECT_EQ(status->job().state(), v1::JOB_STATE_FAILED);

  for (RawClient* client : raw) EXPECT_TRUE(client->Leave().ok());
  clients->clear();
  ASSERT_TRUE(
      daemon_
          ->AwaitStatus(
              [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; },
              absl::Seconds(10))
          .ok());
  auto next = RawClient::JoinJob(daemon_->socket(), 2);
  ASSERT_TRUE(next.ok()) << next.status();
  raw.clear();
  for (auto& client : *next) raw.push_back(client.get());
  EXPECT_EQ(CheckAllreduce(raw, 1, "after"), "");
  for (RawClient* client : raw) EXPECT_TRUE(client->Leave().ok());
}

}  // namespace
}  // namespace collective::testing
