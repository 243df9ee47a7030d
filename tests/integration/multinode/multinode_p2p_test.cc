// Point-to-point messages between ranks of different nodes, with several
// daemons under a real mpirun (one per stand-in node) and real client
// processes running collective-collectives-worker's p2p-* scenarios, which
// check every received byte: the ring over every dtype and size (outputs
// viewed, copied and in the arena; messages above the inline size move as
// data in several chunks), order within and across tags, self-sends
// (local, beside messages between nodes), messages beside allreduces,
// mismatches that fail both ranks with the same sentence, the status of a
// receive that waits for another node's rank, and a rank or a daemon that
// dies while a message waits for it.
#include <csignal>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "tests/integration/collectives_job.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/multinode/mpi_daemons.h"

namespace collective::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(180);

// Small chunks, so that a message above the inline size (64 KiB) moves in
// several pieces.
std::vector<std::string> Flags() {
  return {"--default-arena-bytes",    "16MiB", "--result-arena-bytes",     "64MiB",
          "--fusion-threshold-bytes", "65536", "--cross-node-chunk-bytes", "98304"};
}

std::unique_ptr<MpiDaemons> StartDaemons(const std::vector<int>& local_sizes,
                                         std::vector<std::string> flags = Flags(),
                                         bool recovery = false) {
  auto daemons = MpiDaemons::Start({.nodes = static_cast<int>(local_sizes.size()),
                                    .daemon_flags = std::move(flags),
                                    .recovery = recovery});
  EXPECT_TRUE(daemons.ok()) << daemons.status();
  return daemons.ok() ? std::move(*daemons) : nullptr;
}

void ExpectCleanWorld(MpiDaemons& daemons, bool errors_expected) {
  for (int node = 0; node < daemons.nodes(); ++node) {
    const auto status = QueryStatus(daemons.socket(node));
    ASSERT_TRUE(status.ok()) << "node " << node << ": " << status.status();
    if (!errors_expected) {
      EXPECT_EQ(status->totals().errors(), 0u) << "node " << node;
    }
    EXPECT_EQ(status->pending_messages_size(), 0) << "node " << node;
  }
  EXPECT_TRUE(ExitedCleanly(daemons.Stop())) << daemons.mpirun().Stderr();
}

struct Param {
  std::vector<std::string> args;
  std::vector<int> local_sizes;
};

void PrintTo(const Param& param, std::ostream* os) {
  *os << absl::StrJoin(param.args, " ") << " on local sizes ["
      << absl::StrJoin(param.local_sizes, ", ") << "]";
}

class MultiNodeP2pTest : public ::testing::TestWithParam<Param> {};

TEST_P(MultiNodeP2pTest, EveryRankReceivesTheSendersBytesAcrossNodes) {
  const Param param = GetParam();
  std::unique_ptr<MpiDaemons> daemons = StartDaemons(param.local_sizes);
  ASSERT_NE(daemons, nullptr);
  auto workers = daemons->StartWorkers(CollectivesWorkerBinary(), param.local_sizes, param.args);
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "") << daemons->mpirun().Stderr();
  for (size_t rank = 0; rank < workers->size(); ++rank) {
    EXPECT_THAT((*workers)[rank].Stdout(), HasSubstr("ok ")) << "rank " << rank;
  }
  // Messages crossed nodes: each daemon moved some bytes to or from another.
  // Self-sends stay on their node, as in a job of one node.
  const bool crosses = param.args[0] != "p2p-self";
  for (int node = 0; node < daemons->nodes(); ++node) {
    const auto status = QueryStatus(daemons->socket(node));
    ASSERT_TRUE(status.ok()) << status.status();
    if (crosses) {
      EXPECT_GT(status->totals().cross_node_bytes(), 0u) << "node " << node;
    } else {
      EXPECT_EQ(status->totals().cross_node_bytes(), 0u) << "node " << node;
    }
  }
  ExpectCleanWorld(*daemons, /*errors_expected=*/false);
}

std::vector<Param> Params() {
  std::vector<Param> params;
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{{1, 1}, {1, 2}, {2, 1, 1}}) {
    params.push_back({{"p2p-ring", "--big-bytes", "1048576"}, sizes});
    params.push_back({{"p2p-order"}, sizes});
    params.push_back({{"p2p-self"}, sizes});
  }
  // Ranks 0 and 1 share node 0 (the scenario watches its own daemon's
  // status for their message), while allreduces span the nodes.
  params.push_back({{"p2p-beside-allreduce"}, {2, 1}});
  params.push_back({{"p2p-beside-allreduce"}, {2, 1, 1}});
  return params;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, MultiNodeP2pTest, ::testing::ValuesIn(Params()),
                         [](const auto& test) {
                           return absl::StrCat(
                               absl::StrReplaceAll(test.param.args[0], {{"-", "_"}}), "_",
                               absl::StrJoin(test.param.local_sizes, "_"));
                         });

// Rank 0 (node 0) sends, rank 1 (another node) receives wrongly: both
// fail with the same sentence, and the next pair works.
class MultiNodeP2pMismatchTest
    : public ::testing::TestWithParam<std::pair<std::string, std::vector<int>>> {};

TEST_P(MultiNodeP2pMismatchTest, BothRanksHearTheSameErrorAndTheJobGoesOn) {
  const auto& [kind, sizes] = GetParam();
  std::unique_ptr<MpiDaemons> daemons = StartDaemons(sizes);
  ASSERT_NE(daemons, nullptr);
  auto workers =
      daemons->StartWorkers(CollectivesWorkerBinary(), sizes, {"p2p-mismatch", "--kind", kind});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "") << daemons->mpirun().Stderr();
  const std::string expected =
      kind == "bytes"
          ? "FAILED_PRECONDITION: Mismatched send and receive of the message from rank 0 to rank "
            "1 with tag 3: rank 0 sends 16 bytes (a CPU tensor of float32 [4]), rank 1 receives "
            "32 bytes (a CPU tensor of float32 [8]); a receive must name the send's dtype and "
            "byte size"
          : "FAILED_PRECONDITION: Mismatched send and receive of the message from rank 0 to rank "
            "1 with tag 3: rank 0 sends 16 bytes (a CPU tensor of float32 [4]), rank 1 receives "
            "16 bytes (a CPU tensor of int32 [4]); a receive must name the send's dtype and byte "
            "size";
  EXPECT_THAT((*workers)[0].Stdout(), HasSubstr("error: " + expected));
  EXPECT_THAT((*workers)[1].Stdout(), HasSubstr("error: " + expected));
  for (size_t rank = 0; rank < workers->size(); ++rank) {
    EXPECT_THAT((*workers)[rank].Stdout(), HasSubstr("ok 1 p2p-mismatch")) << "rank " << rank;
  }
  ExpectCleanWorld(*daemons, /*errors_expected=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, MultiNodeP2pMismatchTest,
    ::testing::Values(std::pair<std::string, std::vector<int>>{"bytes", {1, 2}},
                      std::pair<std::string, std::vector<int>>{"dtype", {1, 1, 1}}),
    [](const auto& test) {
      return absl::StrCat(test.param.first, "_", absl::StrJoin(test.param.second, "_"));
    });

// Rank 0's receive from rank 1 (node 1) waits: node 0's status shows rank
// 0 waiting in a receive for rank 1, and node 1's shows the same (who
// waits for its rank); then the send comes.
TEST(MultiNodeP2pStatusTest, BothNodesShowTheReceiveThatWaitsForTheOtherNode) {
  std::unique_ptr<MpiDaemons> daemons = StartDaemons({1, 1});
  ASSERT_NE(daemons, nullptr);
  const std::string go = daemons->directory() + "/go";
  auto workers =
      daemons->StartWorkers(CollectivesWorkerBinary(), {1, 1}, {"p2p-pending", "--go", go});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_NO_FATAL_FAILURE(AwaitSaid(*workers, "pending", absl::Seconds(60)));
  for (int node = 0; node < 2; ++node) {
    const CommandResult table = RunCollectivectl(daemons->socket(node), {"status"});
    EXPECT_EQ(table.exit_code, 0) << table.err;
    EXPECT_THAT(table.out, HasSubstr("PENDING MESSAGES")) << "node " << node;
    EXPECT_THAT(table.out, ContainsRegex("0 +receive +1 +5 +0 +float32 +16 B")) << "node " << node;
  }
  { std::ofstream(go).put('\n'); }
  EXPECT_EQ(WaitForWorkers(*workers, absl::Seconds(60)), "");
  ExpectCleanWorld(*daemons, /*errors_expected=*/false);
}

// Rank 1 (node 1) dies while rank 0's receive from it waits: rank 0's error
// names it.
TEST(MultiNodeP2pFailureTest, ARankThatDiesFailsTheReceiveOnTheOtherNodeNamingIt) {
  std::unique_ptr<MpiDaemons> daemons = StartDaemons({1, 1});
  ASSERT_NE(daemons, nullptr);
  auto workers = daemons->StartWorkers(CollectivesWorkerBinary(), {1, 1}, {"p2p-dead-peer"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "") << daemons->mpirun().Stderr();
  const std::string waiting = (*workers)[0].Stdout();
  EXPECT_THAT(waiting, HasSubstr("error: ABORTED: "));
  EXPECT_THAT(waiting, HasSubstr("rank 1 "));
  EXPECT_THAT(waiting, HasSubstr("disconnected from collectived without leaving"));
  daemons->Stop();
}

// The daemon of node 1 dies while rank 0's receive from its rank waits:
// rank 0's error names the node and its rank.
TEST(MultiNodeP2pFailureTest, ADaemonThatDiesFailsTheWaitingReceiveNamingTheNode) {
  std::unique_ptr<MpiDaemons> daemons =
      StartDaemons({1, 1},
                   {"--default-arena-bytes", "16MiB", "--result-arena-bytes", "64MiB",
                    "--node-timeout-seconds", "2", "--heartbeat-interval-ms", "100"},
                   /*recovery=*/true);
  ASSERT_NE(daemons, nullptr);
  const std::string go = daemons->directory() + "/never";
  auto workers =
      daemons->StartWorkers(CollectivesWorkerBinary(), {1, 1}, {"p2p-pending", "--go", go});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_NO_FATAL_FAILURE(AwaitSaid(*workers, "pending", absl::Seconds(60)));
  auto victim = daemons->DaemonPid(1);
  ASSERT_TRUE(victim.ok()) << victim.status();
  ASSERT_EQ(::kill(*victim, SIGKILL), 0);
  const std::optional<int> exit = (*workers)[0].Wait(absl::Seconds(30));
  ASSERT_TRUE(exit.has_value()) << "rank 0's receive got no error";
  const std::string said = (*workers)[0].Stdout() + (*workers)[0].Stderr();
  EXPECT_THAT(said, HasSubstr("node 1 (")) << "the error names the node";
  EXPECT_THAT(said, HasSubstr("rank 1)")) << "and its rank";
  EXPECT_THAT(said, HasSubstr("stopped answering"));
  (*workers)[1].Signal(SIGKILL);
  (void)(*workers)[1].Wait(absl::Seconds(30));
  ASSERT_TRUE(daemons->Wait(absl::Seconds(30)).has_value()) << daemons->mpirun().Stderr();
}

}  // namespace
}  // namespace collective::testing
