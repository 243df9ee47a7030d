// The operator's view: collectivectl health and status (tables and JSON)
// against a real daemon with a job blocked on a tensor, and collectived
// --print-config with values from the environment and from flags.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <signal.h>

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(15);

// The line of `text` that starts with `prefix`, or "".
std::string LineStartingWith(const std::string& text, absl::string_view prefix) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, prefix)) return std::string(line);
  }
  return "";
}

std::vector<std::string> Words(absl::string_view line) {
  return absl::StrSplit(line, ' ', absl::SkipEmpty());
}

TEST(CollectivectlTest, HealthSucceedsOnlyWithADaemon) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const CommandResult healthy = RunCollectivectl((*daemon)->socket(), {"health"});
  EXPECT_EQ(healthy.exit_code, 0) << healthy.err;
  EXPECT_TRUE(absl::StartsWith(healthy.out, "serving (collectived ")) << healthy.out;
  const std::string socket = (*daemon)->socket();
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();

  // The same socket path, with nobody behind it any more.
  const CommandResult dead = RunCollectivectl(socket, {"--timeout", "2", "health"});
  EXPECT_NE(dead.exit_code, 0);
  EXPECT_EQ(dead.out, "");
  EXPECT_TRUE(absl::StartsWith(dead.err, absl::StrCat("collectivectl: ", socket, ": ")))
      << dead.err;
  EXPECT_TRUE(absl::StrContains(dead.err, "No such file or directory")) << dead.err;
}

class CollectivectlStatusTest : public ::testing::Test {
 protected:
  // A job of two: rank 0 waits on 'stuck', which rank 1 never submits.
  void SetUp() override {
    auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    auto victim = daemon_->StartWorker(TestWorkerBinary(), 1, 2, {"victim"});
    ASSERT_TRUE(victim.ok()) << victim.status();
    victim_ = std::make_unique<Subprocess>(std::move(*victim));
    auto waiter =
        daemon_->StartWorker(TestWorkerBinary(), 0, 2, {"wait-stuck", "--expect", "disconnected"});
    ASSERT_TRUE(waiter.ok()) << waiter.status();
    waiter_ = std::make_unique<Subprocess>(std::move(*waiter));
    auto blocked = daemon_->AwaitStatus(StuckJobBlocked, kTimeout);
    ASSERT_TRUE(blocked.ok()) << blocked.status();
  }

  void TearDown() override {
    if (daemon_ == nullptr) return;
    if (victim_ != nullptr) victim_->Signal(SIGKILL);
    if (waiter_ != nullptr) {
      const auto waited = waiter_->Wait(kTimeout);
      EXPECT_TRUE(ExitedCleanly(waited)) << (waited ? waiter_->Describe(*waited) : "still runs");
    }
    auto idle = daemon_->AwaitStatus(
        [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; },
        kTimeout);
    EXPECT_TRUE(idle.ok()) << idle.status();
    EXPECT_TRUE(ExitedCleanly(daemon_->Stop())) << daemon_->process().Stderr();
    EXPECT_TRUE(daemon_->Segments().empty());
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Subprocess> victim_;
  std::unique_ptr<Subprocess> waiter_;
};

TEST_F(CollectivectlStatusTest, TablesNameTheMissingRank) {
  const CommandResult status = RunCollectivectl(daemon_->socket(), {"status"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const std::string& out = status.out;
  EXPECT_TRUE(absl::StartsWith(out, "collectived ")) << out;
  EXPECT_TRUE(absl::StrContains(
      out, absl::StrCat("(pid ", daemon_->process().pid(), ") on ", daemon_->socket())))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "job 'default': running, 2 of 2 local ranks registered"))
      << out;

  // CLIENTS: one row per rank, with its pid and an attached session.
  ASSERT_TRUE(absl::StrContains(out, "\nCLIENTS\n")) << out;
  for (const auto& [rank, pid] : {std::pair{0, waiter_->pid()}, std::pair{1, victim_->pid()}}) {
    const std::vector<std::string> row = Words(LineStartingWith(out, absl::StrCat(rank, " ")));
    ASSERT_GE(row.size(), 5u) << out;
    EXPECT_EQ(row[1], std::to_string(rank)) << out;  // local rank
    EXPECT_EQ(row[2], std::to_string(pid)) << out;
    EXPECT_EQ(row[4], "attached") << out;
  }

  // PENDING TENSORS: 'stuck' has rank 0 and misses rank 1.
  ASSERT_TRUE(absl::StrContains(out, "\nPENDING TENSORS\nNAME ")) << out;
  const std::vector<std::string> stuck = Words(LineStartingWith(out, "stuck "));
  ASSERT_EQ(stuck.size(), 6u) << out;
  EXPECT_EQ(stuck[1], "allreduce");
  EXPECT_EQ(stuck[2], "0");  // process set
  EXPECT_EQ(stuck[3], "0");  // ready ranks
  EXPECT_EQ(stuck[4], "1");  // missing ranks
}

TEST_F(CollectivectlStatusTest, JsonParsesIntoStatusResponse) {
  const CommandResult status = RunCollectivectl(daemon_->socket(), {"status", "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  v1::StatusResponse response;
  const auto parsed = google::protobuf::util::JsonStringToMessage(status.out, &response);
  ASSERT_TRUE(parsed.ok()) << parsed.ToString() << "\n" << status.out;

  EXPECT_EQ(response.pid(), daemon_->process().pid());
  EXPECT_EQ(response.socket(), daemon_->socket());
  EXPECT_EQ(response.job().id(), "default");
  EXPECT_EQ(response.job().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(response.job().local_size(), 2);
  EXPECT_EQ(response.job().registered(), 2);
  ASSERT_EQ(response.clients_size(), 2);
  for (const v1::ClientStatus& client : response.clients()) {
    EXPECT_EQ(client.pid(), client.rank() == 0 ? waiter_->pid() : victim_->pid());
    EXPECT_TRUE(client.attached());
    EXPECT_EQ(client.outstanding_requests(), 1u);
  }
  const v1::PendingTensor* stuck = nullptr;
  for (const v1::PendingTensor& tensor : response.pending()) {
    if (tensor.name() == "stuck") stuck = &tensor;
  }
  ASSERT_NE(stuck, nullptr) << status.out;
  EXPECT_EQ(stuck->collective(), v1::COLLECTIVE_ALLREDUCE);
  EXPECT_EQ(std::vector<int32_t>(stuck->ready_ranks().begin(), stuck->ready_ranks().end()),
            std::vector<int32_t>{0});
  EXPECT_EQ(std::vector<int32_t>(stuck->missing_ranks().begin(), stuck->missing_ranks().end()),
            std::vector<int32_t>{1});
  EXPECT_GE(stuck->age_seconds(), 0);
}

TEST(PrintConfigTest, ShowsEffectiveValuesAndTheirSources) {
  const CommandResult run =
      RunCommand({CollectivedBinary(), "--print-config", "--fusion-threshold-bytes", "2MiB"},
                 {{"COLLECTIVED_HEARTBEAT_INTERVAL_MS", "250"}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::vector<std::string> fusion =
      Words(LineStartingWith(run.out, "fusion_threshold_bytes:"));
  EXPECT_EQ(fusion, (std::vector<std::string>{"fusion_threshold_bytes:", "2097152", "#", "flag",
                                              "--fusion-threshold-bytes"}))
      << run.out;
  const std::vector<std::string> heartbeat =
      Words(LineStartingWith(run.out, "heartbeat_interval_ms:"));
  EXPECT_EQ(heartbeat, (std::vector<std::string>{"heartbeat_interval_ms:", "250", "#", "env",
                                                 "COLLECTIVED_HEARTBEAT_INTERVAL_MS"}))
      << run.out;
  const std::vector<std::string> names = Words(LineStartingWith(run.out, "max_name_bytes:"));
  EXPECT_EQ(names, (std::vector<std::string>{"max_name_bytes:", "1024", "#", "default"}))
      << run.out;
}

TEST(PrintConfigTest, BadValueExitsTwoNamingTheKnob) {
  const CommandResult flag =
      RunCommand({CollectivedBinary(), "--fusion-threshold-bytes", "banana"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_TRUE(absl::StartsWith(
      flag.err, "collectived: fusion_threshold_bytes (flag --fusion-threshold-bytes): 'banana' "))
      << flag.err;
  const CommandResult env =
      RunCommand({CollectivedBinary(), "--print-config"}, {{"COLLECTIVED_MAX_NAME_BYTES", "lots"}});
  EXPECT_EQ(env.exit_code, 2);
  EXPECT_TRUE(absl::StartsWith(
      env.err, "collectived: max_name_bytes (env COLLECTIVED_MAX_NAME_BYTES): 'lots' "))
      << env.err;
}

}  // namespace
}  // namespace collective::testing
