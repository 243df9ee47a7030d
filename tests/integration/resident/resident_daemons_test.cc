// Daemons started on their own, one per stand-in node (each on a socket of
// its own and a loopback address of its own), as systemd or a DaemonSet
// starts them, with no mpirun: the daemons of a job's nodes form that job's
// world over Gloo through its rendezvous when its ranks register, and keep
// serving other jobs. Every op and dtype of allreduce and the other
// collectives' scenarios across 2 and 3 nodes; two jobs at once on nodes
// {0,1} and {1,2}; kill -9 of a daemon mid-job (its jobs fail naming the
// node, the others serve the next job); a rendezvous that never completes
// (its error names the node that did not come); init/shutdown cycles.
#include "tests/integration/resident/resident_daemons.h"

#include <csignal>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "tests/integration/collectives_job.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(120);
constexpr char kFusionThreshold[] = "65536";
constexpr double kNodeTimeoutSeconds = 2;

std::vector<std::string> Flags() {
  return {"--default-arena-bytes",    "16MiB",
          "--result-arena-bytes",     "64MiB",
          "--fusion-threshold-bytes", kFusionThreshold,
          "--node-timeout-seconds",   absl::StrCat(kNodeTimeoutSeconds),
          "--heartbeat-interval-ms",  "100"};
}

std::unique_ptr<ResidentDaemons> StartDaemons(int nodes,
                                              const std::vector<std::string>& extra = {}) {
  std::vector<std::string> flags = Flags();
  flags.insert(flags.end(), extra.begin(), extra.end());
  auto daemons = ResidentDaemons::Start(nodes, flags);
  EXPECT_TRUE(daemons.ok()) << daemons.status();
  return daemons.ok() ? std::move(*daemons) : nullptr;
}

// Every daemon still answers and counted no errors (unless some were
// expected): none of them stops when a job's world ends.
void ExpectDaemonsServing(ResidentDaemons& daemons, bool errors_expected = false) {
  for (int node = 0; node < daemons.nodes(); ++node) {
    const auto status = daemons.daemon(node).Status();
    ASSERT_TRUE(status.ok()) << "node " << node << ": " << status.status();
    if (!errors_expected) {
      EXPECT_EQ(status->totals().errors(), 0u) << "node " << node;
    }
  }
}

struct Job {
  std::vector<int> local_sizes;
  std::string Name() const { return absl::StrJoin(local_sizes, "_"); }
};

class ResidentAllreduceTest : public ::testing::TestWithParam<Job> {};

TEST_P(ResidentAllreduceTest, EveryOpAndDtypeCombinesAcrossNodes) {
  const Job job = GetParam();
  std::unique_ptr<ResidentDaemons> daemons = StartDaemons(static_cast<int>(job.local_sizes.size()));
  ASSERT_NE(daemons, nullptr);
  auto workers = daemons->StartWorkers(
      TestWorkerBinary(), job.local_sizes,
      {"matrix", "--across-nodes", "--big-bytes", kFusionThreshold, "--steps", "2"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");
  int size = 0;
  for (int local : job.local_sizes) size += local;
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_THAT((*workers)[rank].Stdout(),
                HasSubstr(absl::StrCat(" cases on rank ", rank, " of ", size, "\n")));
  }
  for (int node = 0; node < daemons->nodes(); ++node) {
    const auto status = daemons->daemon(node).Status();
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_GT(status->totals().cross_node_collectives(), 0u) << "node " << node;
  }
  ExpectDaemonsServing(*daemons);
}

INSTANTIATE_TEST_SUITE_P(Jobs, ResidentAllreduceTest,
                         ::testing::Values(Job{{1, 2}}, Job{{2, 1, 1}}),
                         [](const auto& test) { return test.param.Name(); });

struct Scenario {
  std::vector<std::string> args;
};

class ResidentScenarioTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(ResidentScenarioTest, EveryRankOnEveryNodeGetsTheReferenceResults) {
  const Scenario scenario = GetParam();
  std::unique_ptr<ResidentDaemons> daemons = StartDaemons(3);
  ASSERT_NE(daemons, nullptr);
  std::vector<std::string> args = scenario.args;
  args.insert(args.end(), {"--across-nodes", "--big-bytes", kFusionThreshold});
  auto workers = daemons->StartWorkers(CollectivesWorkerBinary(), {2, 1, 1}, args);
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");
  const bool errors_expected =
      scenario.args[0] == "join" || absl::StrContains(scenario.args[0], "sets");
  ExpectDaemonsServing(*daemons, errors_expected);
}

INSTANTIATE_TEST_SUITE_P(
    Scenarios, ResidentScenarioTest,
    ::testing::Values(Scenario{{"allgather-matrix"}}, Scenario{{"broadcast-matrix"}},
                      Scenario{{"alltoall-matrix"}}, Scenario{{"reducescatter-matrix"}},
                      Scenario{{"grouped"}}, Scenario{{"mixed"}}, Scenario{{"rooted-matrix"}},
                      Scenario{{"barrier"}}, Scenario{{"dynamic-sets"}},
                      Scenario{{"static-sets", "--static-sets", "0,2;1"}},
                      Scenario{{"join", "--early", "3", "--last", "0"}}),
    [](const auto& test) {
      std::string name = absl::StrJoin(test.param.args, "_");
      return absl::StrReplaceAll(name, {{"-", ""}, {",", ""}, {";", "_"}});
    });

TEST(ResidentDaemonsTest, TwoJobsOnNodesZeroOneAndOneTwoRunAtOnce) {
  std::unique_ptr<ResidentDaemons> daemons = StartDaemons(3);
  ASSERT_NE(daemons, nullptr);
  const std::vector<std::string> args = {"matrix", "--across-nodes", "--big-bytes",
                                         kFusionThreshold};
  auto a = daemons->StartWorkers(TestWorkerBinary(), {0, 1}, {1, 2}, args, "job-a");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = daemons->StartWorkers(TestWorkerBinary(), {1, 2}, {2, 1}, args, "job-b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(WaitForWorkers(*a, kTimeout), "");
  EXPECT_EQ(WaitForWorkers(*b, kTimeout), "");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT((*a)[rank].Stdout(), HasSubstr(absl::StrCat(" cases on rank ", rank, " of 3\n")));
    EXPECT_THAT((*b)[rank].Stdout(), HasSubstr(absl::StrCat(" cases on rank ", rank, " of 3\n")));
  }
  ExpectDaemonsServing(*daemons);
}

TEST(ResidentDaemonsTest, AJobFormsAgainAfterItsRanksShutDownAndInitialiseAgain) {
  std::unique_ptr<ResidentDaemons> daemons = StartDaemons(2);
  ASSERT_NE(daemons, nullptr);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    auto workers = daemons->StartWorkers(
        TestWorkerBinary(), {1, 1}, {"matrix", "--across-nodes", "--big-bytes", kFusionThreshold});
    ASSERT_TRUE(workers.ok()) << workers.status();
    ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");
  }
  ExpectDaemonsServing(*daemons);
}

TEST(ResidentDaemonsTest, AKilledDaemonFailsItsJobNamingTheNodeAndTheOthersServeTheNextJob) {
  std::unique_ptr<ResidentDaemons> daemons = StartDaemons(3);
  ASSERT_NE(daemons, nullptr);
  auto workers = daemons->StartWorkers(CollectivesWorkerBinary(), {1, 1, 1}, {"loop"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  AwaitSaid(*workers, "running\n", absl::Seconds(60));
  const absl::Time killed = absl::Now();
  ASSERT_EQ(::kill(daemons->daemon(1).process().pid(), SIGKILL), 0);
  const absl::Duration bound = absl::Seconds(kNodeTimeoutSeconds) + absl::Seconds(10);
  for (int rank : {0, 2}) {
    const std::optional<int> exit = (*workers)[rank].Wait(killed + bound - absl::Now());
    ASSERT_TRUE(exit.has_value()) << "rank " << rank << " got no error within " << bound
                                  << "; node 0's daemon said:\n"
                                  << daemons->daemon(0).process().Stderr()
                                  << "\nnode 2's daemon said:\n"
                                  << daemons->daemon(2).process().Stderr();
    const std::string said = (*workers)[rank].Stdout();
    EXPECT_THAT(said, HasSubstr("error after "));
    // The node, and the host (each stand-in node's own loopback address).
    EXPECT_THAT(said, HasSubstr("node 1 (127.0.0.2)")) << "the error names the node";
  }
  (*workers)[1].Wait(absl::Seconds(30));
  // The other daemons keep running and serve the next job, across them.
  for (int node : {0, 2}) {
    EXPECT_TRUE(daemons->daemon(node).Status().ok()) << "node " << node << " stopped";
  }
  auto next =
      daemons->StartWorkers(TestWorkerBinary(), {0, 2}, {1, 1},
                            {"matrix", "--across-nodes", "--big-bytes", kFusionThreshold}, "next");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(WaitForWorkers(*next, kTimeout), "");
}

TEST(ResidentDaemonsTest, ARendezvousThatNeverCompletesNamesTheNodeThatDidNotCome) {
  std::unique_ptr<ResidentDaemons> daemons = StartDaemons(2, {"--register-timeout-seconds", "3"});
  ASSERT_NE(daemons, nullptr);
  // Node 1's ranks never start.
  auto workers =
      daemons->daemon(0).StartWorkers(TestWorkerBinary(), 1, {"matrix", "--across-nodes"},
                                      {{"COLLECTIVE_RENDEZVOUS", daemons->rendezvous()},
                                       {"COLLECTIVE_NODE", "0"},
                                       {"COLLECTIVE_NODES", "2"}});
  ASSERT_TRUE(workers.ok()) << workers.status();
  const std::optional<int> exit = (*workers)[0].Wait(absl::Seconds(60));
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(ExitedCleanly(exit));
  EXPECT_THAT((*workers)[0].Stderr(), HasSubstr("node 1"));
  EXPECT_THAT((*workers)[0].Stderr(), HasSubstr(daemons->rendezvous()));
  ExpectDaemonsServing(*daemons, /*errors_expected=*/true);
}

}  // namespace
}  // namespace collective::testing
