// Point-to-point messages with a real daemon and 2, 3 and 4 real client
// processes (collective-collectives-worker's p2p-* scenarios, which check
// every received byte): a ring over every dtype and size with outputs
// viewed, copied and in the arena, message order within and across tags,
// self-sends, mismatched receives failing both ranks, a peer that dies while
// a receive waits for it, and messages beside allreduces. The daemon's
// status must list a waiting half as who waits for whom.
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/integration/collectives_job.h"

namespace collective::testing {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kFlags = {"--fusion-threshold-bytes", "65536",
                                         "--default-arena-bytes",    "16MiB",
                                         "--result-arena-bytes",     "64MiB"};

struct Param {
  std::string scenario;
  int clients;
};

void PrintTo(const Param& param, std::ostream* os) {
  *os << param.scenario << " with " << param.clients << " clients";
}

class P2pScenarioTest : public ::testing::TestWithParam<Param> {};

TEST_P(P2pScenarioTest, EveryRankReceivesTheSendersBytes) {
  const Param param = GetParam();
  Job job;
  ASSERT_NO_FATAL_FAILURE(
      RunJob(job, kFlags, param.clients, {param.scenario, "--big-bytes", "65536"}));
  EXPECT_EQ(job.failures, "");
  for (int rank = 0; rank < param.clients; ++rank) {
    EXPECT_THAT(job.workers[rank].Stdout(), HasSubstr("ok ")) << "rank " << rank;
  }
  auto status = job.daemon->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().errors(), 0u);
  EXPECT_EQ(status->pending_messages_size(), 0);
  ExpectCleanStop(*job.daemon);
}

std::vector<Param> Params() {
  std::vector<Param> params;
  for (const char* scenario : {"p2p-ring", "p2p-order", "p2p-self", "p2p-beside-allreduce"}) {
    for (int clients : {2, 3, 4}) params.push_back({scenario, clients});
  }
  params.push_back({"p2p-self", 1});
  return params;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, P2pScenarioTest, ::testing::ValuesIn(Params()),
                         [](const auto& test_info) {
                           return absl::StrCat(
                               absl::StrReplaceAll(test_info.param.scenario, {{"-", "_"}}), "_",
                               test_info.param.clients, "Clients");
                         });

class P2pMismatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(P2pMismatchTest, BothRanksHearTheSameErrorAndTheJobGoesOn) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(RunJob(job, kFlags, 3, {"p2p-mismatch", "--kind", GetParam()}));
  EXPECT_EQ(job.failures, "");
  const std::string sender = job.workers[0].Stdout();
  const std::string receiver = job.workers[1].Stdout();
  const std::string expected =
      GetParam() == "bytes"
          ? "FAILED_PRECONDITION: Mismatched send and receive of the message from rank 0 to rank "
            "1 with tag 3: rank 0 sends 16 bytes (a CPU tensor of float32 [4]), rank 1 receives "
            "32 bytes (a CPU tensor of float32 [8]); a receive must name the send's dtype and "
            "byte size"
          : "FAILED_PRECONDITION: Mismatched send and receive of the message from rank 0 to rank "
            "1 with tag 3: rank 0 sends 16 bytes (a CPU tensor of float32 [4]), rank 1 receives "
            "16 bytes (a CPU tensor of int32 [4]); a receive must name the send's dtype and byte "
            "size";
  EXPECT_THAT(sender, HasSubstr("error: " + expected));
  EXPECT_THAT(receiver, HasSubstr("error: " + expected));
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(job.workers[rank].Stdout(), HasSubstr("ok 1 p2p-mismatch")) << "rank " << rank;
  }
  ExpectCleanStop(*job.daemon);
}

INSTANTIATE_TEST_SUITE_P(Kinds, P2pMismatchTest, ::testing::Values("bytes", "dtype"));

TEST(P2pDeadPeerTest, TheWaitingRanksErrorNamesTheDeadRank) {
  for (int clients : {2, 3}) {
    SCOPED_TRACE(absl::StrCat(clients, " clients"));
    Job job;
    ASSERT_NO_FATAL_FAILURE(RunJob(job, kFlags, clients, {"p2p-dead-peer"}));
    EXPECT_EQ(job.failures, "");
    EXPECT_THAT(job.workers[1].Stdout(), HasSubstr("dying"));
    const std::string waiting = job.workers[0].Stdout();
    EXPECT_THAT(waiting, HasSubstr("error: ABORTED: rank 1 "));
    EXPECT_THAT(waiting, HasSubstr("disconnected from collectived without leaving"));
    job.daemon->Stop();
  }
}

TEST(P2pStatusTest, CollectivectlShowsWhoWaitsForWhom) {
  auto daemon = DaemonProcess::Start({.flags = kFlags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string go = (*daemon)->directory() + "/go";
  auto workers = (*daemon)->StartWorkers(CollectivesWorkerBinary(), 2, {"p2p-pending", "--go", go});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_NO_FATAL_FAILURE(AwaitSaid(*workers, "pending", absl::Seconds(60)));
  const CommandResult table = RunCollectivectl((*daemon)->socket(), {"status"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("PENDING MESSAGES"));
  EXPECT_THAT(table.out, ::testing::ContainsRegex("RANK +WAITS IN +FOR RANK +TAG +SET +DTYPE"));
  EXPECT_THAT(table.out, ::testing::ContainsRegex("0 +receive +1 +5 +0 +float32 +16 B"));
  const CommandResult json = RunCollectivectl((*daemon)->socket(), {"status", "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"pending_messages\""));
  EXPECT_THAT(json.out, HasSubstr("\"COLLECTIVE_RECV\""));
  { std::ofstream(go).put('\n'); }
  EXPECT_EQ(WaitForWorkers(*workers, absl::Seconds(60)), "");
  ExpectCleanStop(**daemon);
}

}  // namespace
}  // namespace collective::testing
