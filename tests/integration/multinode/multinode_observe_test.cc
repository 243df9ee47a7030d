// What an operator sees of a job across nodes, with daemons under a real
// `mpirun` and real client processes:
// - the response cache: after the first step of a repeated set of tensors,
//   steps run without the full request exchange, as the negotiation
//   counters of `collectivectl status` show (and a changed tensor, or a
//   capacity of 0, goes back to the full exchange); node 0 combines those
//   small allreduces itself as it decides, unless cross_node_inline_bytes
//   is 0, and another node holding every node's part combines them
//   without waiting for that decision (cross_node_peer_parts);
// - the timeline: a tensor across nodes has its negotiation, its local
//   reduction and its transfer among the daemons (CROSS_NODE).
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/common/trace_reader.h"
#include "tests/integration/collectives_job.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/multinode/mpi_daemons.h"

namespace collective::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kSteps = 6;
constexpr int kTensors = 8;

struct CacheCase {
  std::string name;
  std::vector<std::string> daemon_flags;
  std::vector<std::string> worker_flags;
  uint64_t in_full;     // per node
  uint64_t from_cache;  // per node
  uint64_t combined;    // node 0: of those from the cache, combined as it decided
};

void PrintTo(const CacheCase& c, std::ostream* os) { *os << c.name; }

class ResponseCacheTest : public ::testing::TestWithParam<CacheCase> {};

TEST_P(ResponseCacheTest, StepsAfterTheFirstSkipTheFullExchange) {
  const CacheCase& c = GetParam();
  auto daemons = MpiDaemons::Start({.nodes = 2, .daemon_flags = c.daemon_flags});
  ASSERT_TRUE(daemons.ok()) << daemons.status();
  std::vector<std::string> args = {
      "repeat",        "--steps", absl::StrCat(kSteps), "--tensors", absl::StrCat(kTensors),
      "--across-nodes"};
  args.insert(args.end(), c.worker_flags.begin(), c.worker_flags.end());
  auto workers = (*daemons)->StartWorkers(CollectivesWorkerBinary(), {2, 1}, args);
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, absl::Seconds(60)), "");
  for (int node = 0; node < 2; ++node) {
    SCOPED_TRACE(absl::StrCat("node ", node));
    const auto status = QueryStatus((*daemons)->socket(node));
    ASSERT_TRUE(status.ok()) << status.status();
    // The job has ended: the totals keep its counters.
    const v1::Totals& totals = status->totals();
    EXPECT_EQ(totals.announced_in_full(), c.in_full);
    EXPECT_EQ(totals.announced_from_cache(), c.from_cache);
    if (node == 0) {
      // What every node announced from the cache, node 0 decided from it.
      EXPECT_EQ(totals.decided_in_full(), c.in_full);
      EXPECT_EQ(totals.decided_from_cache(), c.from_cache);
      EXPECT_EQ(totals.decided_combined(), c.combined);
    }
    // collectivectl says the same to people.
    auto cli =
        Subprocess::Start({CollectivectlBinary(), "--socket", (*daemons)->socket(node), "status"});
    ASSERT_TRUE(cli.ok()) << cli.status();
    ASSERT_TRUE(ExitedCleanly(cli->Wait(absl::Seconds(30))));
    EXPECT_THAT(cli->Stdout(),
                HasSubstr(absl::StrCat("negotiation: ", c.in_full, " tensors announced in full, ",
                                       c.from_cache, " from the response cache")));
    if (node == 0 && c.combined != 0) {
      EXPECT_THAT(cli->Stdout(), HasSubstr(absl::StrCat(c.from_cache, " from the cache (",
                                                        c.combined, " combined as it decided)")));
    }
  }
  EXPECT_TRUE(ExitedCleanly((*daemons)->Stop())) << (*daemons)->mpirun().Stderr();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ResponseCacheTest,
    ::testing::Values(
        // The tensors are small: node 0 combines every one decided from the
        // cache.
        CacheCase{"SteadyState", {}, {}, kTensors, kTensors*(kSteps - 1), kTensors*(kSteps - 1)},
        // Tensor 0 changes its shape at step 3: negotiated in full once more,
        // then cached again.
        CacheCase{"AChangedTensorIsNegotiatedAgain",
                  {},
                  {"--change-at", "3"},
                  kTensors + 1,
                  kTensors*(kSteps - 1) - 1,
                  kTensors*(kSteps - 1) - 1},
        CacheCase{"CapacityZeroDisablesIt",
                  {"--response-cache-capacity", "0"},
                  {},
                  kTensors* kSteps,
                  0,
                  0},
        // Every cached tensor's data then goes through MPI after the
        // decision (the workers check the results either way).
        CacheCase{"InlineBytesZeroCombinesNothingOnNodeZero",
                  {"--cross-node-inline-bytes", "0"},
                  {},
                  kTensors,
                  kTensors*(kSteps - 1),
                  0}),
    [](const auto& test) { return test.param.name; });

// Node 0's part of each step is on its way to node 1 before node 1's rank
// submits its own (the lead scenario): node 1 combines the parts itself,
// ahead of node 0's decision, and every result stays right (the workers
// check them). With cross_node_peer_parts off, node 1 takes node 0's
// combination. Node 0 decides every step either way.
TEST(PeerPartsTest, ANodeHoldingEveryPartCombinesThemWithoutWaitingForNodeZero) {
  constexpr int kLedSteps = 12;
  for (const bool peer_parts : {true, false}) {
    SCOPED_TRACE(peer_parts ? "cross_node_peer_parts on" : "off");
    auto daemons = MpiDaemons::Start(
        {.nodes = 2, .daemon_flags = {"--cross-node-peer-parts", peer_parts ? "true" : "false"}});
    ASSERT_TRUE(daemons.ok()) << daemons.status();
    auto workers = (*daemons)->StartWorkers(CollectivesWorkerBinary(), {1, 1},
                                            {"lead", "--steps", absl::StrCat(kLedSteps)});
    ASSERT_TRUE(workers.ok()) << workers.status();
    ASSERT_EQ(WaitForWorkers(*workers, absl::Seconds(60)), "");
    const auto zero = QueryStatus((*daemons)->socket(0));
    ASSERT_TRUE(zero.ok()) << zero.status();
    EXPECT_EQ(zero->totals().decided_combined(), kLedSteps - 1u) << "the first step goes in full";
    EXPECT_EQ(zero->totals().combined_from_peers(), 0u) << "node 0 combines as it decides";
    const auto one = QueryStatus((*daemons)->socket(1));
    ASSERT_TRUE(one.ok()) << one.status();
    const uint64_t from_peers = one->totals().combined_from_peers();
    auto cli =
        Subprocess::Start({CollectivectlBinary(), "--socket", (*daemons)->socket(1), "status"});
    ASSERT_TRUE(cli.ok()) << cli.status();
    ASSERT_TRUE(ExitedCleanly(cli->Wait(absl::Seconds(30))));
    if (peer_parts) {
      // A step may still take node 0's combination, when node 1's
      // announcement reaches node 0 before node 0's part has left it (node
      // 0's daemon descheduled just then): the test asks for some steps,
      // not every one.
      EXPECT_GT(from_peers, 0u);
      EXPECT_LE(from_peers, kLedSteps - 1u);
      const std::string said = absl::StrCat(
          "; ", from_peers, " combined here from every node's part before node 0's decision");
      EXPECT_THAT(cli->Stdout(), HasSubstr(said));
    } else {
      EXPECT_EQ(from_peers, 0u);
      EXPECT_THAT(cli->Stdout(), Not(HasSubstr("combined here")));
    }
    EXPECT_TRUE(ExitedCleanly((*daemons)->Stop())) << (*daemons)->mpirun().Stderr();
  }
}

// A cache smaller than the set of tensors evicts and reuses bits while the
// steps run; every result stays right (the workers check them).
TEST(ResponseCacheEvictionTest, ASmallCacheKeepsEveryResultRight) {
  auto daemons =
      MpiDaemons::Start({.nodes = 3, .daemon_flags = {"--response-cache-capacity", "3"}});
  ASSERT_TRUE(daemons.ok()) << daemons.status();
  auto workers = (*daemons)->StartWorkers(
      CollectivesWorkerBinary(), {1, 2, 1},
      {"repeat", "--steps", "8", "--tensors", "5", "--change-at", "4", "--across-nodes"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, absl::Seconds(60)), "");
  const auto status = QueryStatus((*daemons)->socket(0));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().decided_in_full() + status->totals().decided_from_cache(), 8u * 5u);
  EXPECT_TRUE(ExitedCleanly((*daemons)->Stop())) << (*daemons)->mpirun().Stderr();
}

TEST(MultiNodeTimelineTest, ATensorAcrossNodesShowsItsTransferAmongTheDaemons) {
  auto daemons = MpiDaemons::Start({.nodes = 2});
  ASSERT_TRUE(daemons.ok()) << daemons.status();
  const std::string path = (*daemons)->directory() + "/timeline.json";
  // Rank 0 (node 0) records its daemon's timeline through the client API.
  auto workers = (*daemons)->StartWorkers(CollectivesWorkerBinary(), {1, 1},
                                          {"timeline", "--start", path, "--across-nodes"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, absl::Seconds(60)), "");
  auto events = ReadTrace(path);
  ASSERT_TRUE(events.ok()) << events.status();
  int64_t pid = -1;
  for (const auto& [name, process] : TraceProcesses(*events)) {
    if (name == "tl.allreduce") pid = process;
  }
  ASSERT_GE(pid, 0) << "no row for tl.allreduce";
  const auto negotiation = SelectEvents(*events, "NEGOTIATE_ALLREDUCE", "X", pid);
  const auto reduce = SelectEvents(*events, "REDUCE", "X", pid);
  const auto transfer = SelectEvents(*events, "CROSS_NODE", "X", pid);
  ASSERT_EQ(negotiation.size(), 1u);
  ASSERT_EQ(reduce.size(), 1u);
  ASSERT_EQ(transfer.size(), 1u);
  // In order: negotiated, reduced here, combined with the other node.
  EXPECT_LE(negotiation[0].ts + negotiation[0].dur, reduce[0].ts + 1);
  EXPECT_LE(reduce[0].ts, transfer[0].ts + 1);
  EXPECT_GT(transfer[0].NumberArg("bytes"), 0);
  EXPECT_TRUE(ExitedCleanly((*daemons)->Stop())) << (*daemons)->mpirun().Stderr();
}

}  // namespace
}  // namespace collective::testing
