// Several daemons started by a real `mpirun` on this machine, each on its own
// socket directory standing in for a node, with real client processes: the
// job forms across them (global rank = node offset + local rank), and the
// integration scenarios of the single-node collectives run across the nodes
// — allreduce of every op and dtype, allgather, broadcast, alltoall,
// reducescatter, reduce, gather and scatter matrices, grouped and mixed outstanding collectives,
// barriers, join, static and dynamic process sets spanning nodes — over
// Open MPI's TCP and shared-memory transports, with 2 and 3 daemons, 1 to 3
// clients each, equal and unequal. Mismatches reach every rank on every node
// naming global ranks, and the job goes on.
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tests/integration/collectives_job.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/mismatch_text.h"
#include "tests/integration/multinode/mpi_daemons.h"

namespace collective::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(120);
constexpr char kFusionThreshold[] = "65536";

struct World {
  std::vector<int> local_sizes;
  std::string btl;

  int size() const { return std::accumulate(local_sizes.begin(), local_sizes.end(), 0); }
  std::string Name() const {
    return absl::StrCat(absl::StrJoin(local_sizes, "_"), "_",
                        btl == "tcp,self" ? "Tcp" : "SharedMemory");
  }
};

void PrintTo(const World& world, std::ostream* os) {
  *os << "local sizes [" << absl::StrJoin(world.local_sizes, ", ") << "] over " << world.btl;
}

const World kTwoTcp{{1, 1}, "tcp,self"};
const World kUnequalTcp{{1, 2}, "tcp,self"};
const World kThreeOneShm{{3, 1}, "vader,self"};
const World kThreeNodesTcp{{2, 1, 1}, "tcp,self"};
const World kThreeNodesShm{{1, 3, 2}, "vader,self"};

std::unique_ptr<MpiDaemons> StartDaemons(const World& world, std::vector<std::string> flags = {}) {
  std::vector<std::string> daemon_flags = {"--default-arena-bytes",    "16MiB",
                                           "--result-arena-bytes",     "64MiB",
                                           "--fusion-threshold-bytes", kFusionThreshold};
  daemon_flags.insert(daemon_flags.end(), flags.begin(), flags.end());
  auto daemons = MpiDaemons::Start({.nodes = static_cast<int>(world.local_sizes.size()),
                                    .btl = world.btl,
                                    .daemon_flags = daemon_flags});
  EXPECT_TRUE(daemons.ok()) << daemons.status();
  return daemons.ok() ? std::move(*daemons) : nullptr;
}

// Every daemon answers, counted no errors (unless some were expected), and
// stops cleanly with the others.
void ExpectCleanWorld(MpiDaemons& daemons, bool errors_expected = false) {
  for (int node = 0; node < daemons.nodes(); ++node) {
    const auto status = QueryStatus(daemons.socket(node));
    ASSERT_TRUE(status.ok()) << "node " << node << ": " << status.status();
    if (!errors_expected) {
      EXPECT_EQ(status->totals().errors(), 0u) << "node " << node;
    }
  }
  EXPECT_TRUE(ExitedCleanly(daemons.Stop())) << daemons.mpirun().Stderr();
}

// "ok N ..." -> N.
uint64_t Reported(const std::string& out) {
  const std::vector<std::string> words = absl::StrSplit(out, ' ');
  uint64_t count = 0;
  if (words.size() < 2 || words[0] != "ok" || !absl::SimpleAtoi(words[1], &count)) return 0;
  return count;
}

// --- Allreduce of every op and dtype (the test worker's matrix) ----------

struct AllreduceParam {
  World world;
  bool async = false;
  // Steps of the matrix by the same names: from the second on, node 0
  // decides from the response cache and combines the small ones itself
  // (cross_node_inline_bytes).
  int steps = 1;
};

void PrintTo(const AllreduceParam& param, std::ostream* os) {
  PrintTo(param.world, os);
  if (param.async) *os << ", asynchronous";
  if (param.steps > 1) *os << ", " << param.steps << " steps";
}

class MultiNodeAllreduceTest : public ::testing::TestWithParam<AllreduceParam> {};

TEST_P(MultiNodeAllreduceTest, EveryOpAndDtypeCombinesAcrossNodes) {
  const AllreduceParam param = GetParam();
  std::unique_ptr<MpiDaemons> daemons = StartDaemons(param.world);
  ASSERT_NE(daemons, nullptr);
  std::vector<std::string> args = {"matrix", "--across-nodes", "--big-bytes", kFusionThreshold};
  if (param.async) args.push_back("--async");
  args.insert(args.end(), {"--steps", absl::StrCat(param.steps)});
  auto workers = daemons->StartWorkers(TestWorkerBinary(), param.world.local_sizes, args);
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");
  // Global ranks follow node order: node offset + local rank.
  const int size = param.world.size();
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_THAT((*workers)[rank].Stdout(),
                HasSubstr(absl::StrCat(" cases on rank ", rank, " of ", size, "\n")));
  }
  for (int node = 0; node < daemons->nodes(); ++node) {
    const auto status = QueryStatus(daemons->socket(node));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_GT(status->totals().cross_node_collectives(), 0u) << "node " << node;
    EXPECT_GT(status->totals().announced_in_full() + status->totals().announced_from_cache(), 0u)
        << "node " << node;
    if (node == 0 && param.steps > 1) {
      EXPECT_GT(status->totals().decided_combined(), 0u)
          << "the small cases of the later steps were combined by node 0";
    }
  }
  ExpectCleanWorld(*daemons);
}

INSTANTIATE_TEST_SUITE_P(Worlds, MultiNodeAllreduceTest,
                         ::testing::Values(AllreduceParam{kTwoTcp}, AllreduceParam{kUnequalTcp},
                                           AllreduceParam{kThreeNodesTcp, /*async=*/true},
                                           AllreduceParam{{{2, 2}, "vader,self"}},
                                           AllreduceParam{kThreeNodesShm, /*async=*/true},
                                           AllreduceParam{kUnequalTcp, /*async=*/false, 2},
                                           AllreduceParam{kThreeNodesTcp, /*async=*/true, 2}),
                         [](const auto& test) {
                           return test.param.world.Name() + (test.param.async ? "_Async" : "") +
                                  (test.param.steps > 1 ? "_Steps" : "");
                         });

// --- The other collectives' scenarios (the collectives worker) ----------

struct ScenarioParam {
  std::vector<std::string> args;  // the scenario and its flags
  World world;
};

void PrintTo(const ScenarioParam& param, std::ostream* os) {
  *os << absl::StrJoin(param.args, " ") << " on ";
  PrintTo(param.world, os);
}

class MultiNodeScenarioTest : public ::testing::TestWithParam<ScenarioParam> {};

TEST_P(MultiNodeScenarioTest, EveryRankOnEveryNodeGetsTheReferenceResults) {
  const ScenarioParam param = GetParam();
  std::unique_ptr<MpiDaemons> daemons = StartDaemons(param.world);
  ASSERT_NE(daemons, nullptr);
  std::vector<std::string> args = param.args;
  args.insert(args.end(), {"--across-nodes", "--big-bytes", kFusionThreshold});
  auto workers = daemons->StartWorkers(CollectivesWorkerBinary(), param.world.local_sizes, args);
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");
  // Every rank ran (and checked) the same number of cases: the scenarios
  // that say "ok N ..." alone.
  const uint64_t cases = Reported((*workers)[0].Stdout());
  for (size_t rank = 0; rank < workers->size(); ++rank) {
    const std::vector<std::string> lines = Lines((*workers)[rank].Stdout());
    ASSERT_FALSE(lines.empty()) << "rank " << rank;
    if (lines.size() == 1 && param.args[0] != "barrier") {
      EXPECT_EQ(Reported(lines.back()), cases) << "rank " << rank;
    }
  }
  // Errors are part of join's and the set scenarios' script; the matrices
  // have none.
  const bool errors_expected = param.args[0] == "join" || absl::StrContains(param.args[0], "sets");
  ExpectCleanWorld(*daemons, errors_expected);
}

std::vector<ScenarioParam> ScenarioParams() {
  std::vector<ScenarioParam> params;
  for (const char* scenario : {"allgather-matrix", "broadcast-matrix", "alltoall-matrix",
                               "reducescatter-matrix", "grouped", "mixed"}) {
    for (const World& world :
         {kTwoTcp, kUnequalTcp, kThreeOneShm, kThreeNodesTcp, kThreeNodesShm}) {
      params.push_back({{scenario}, world});
    }
  }
  // Reduce, gather and scatter, one test each, on two daemons (the root on
  // either node, alone or with a node mate) and on three.
  for (const char* rooted : {"reduce", "gather", "scatter"}) {
    params.push_back({{"rooted-matrix", "--only", rooted}, kUnequalTcp});
    params.push_back({{"rooted-matrix", "--only", rooted}, kThreeNodesShm});
  }
  for (const World& world : {kUnequalTcp, kThreeNodesTcp, kThreeNodesShm}) {
    const int last = world.size() - 1;
    params.push_back({{"barrier"}, world});
    params.push_back({{"dynamic-sets"}, world});
    params.push_back({{"static-sets", "--static-sets", "0,2;1"}, world});
    // The rank that joins early, then the last to join: on other nodes,
    // alone on its node, or with node mates.
    params.push_back({{"join", "--early", std::to_string(last), "--last", "0"}, world});
    params.push_back({{"join", "--early", "0", "--last", std::to_string(last)}, world});
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, MultiNodeScenarioTest, ::testing::ValuesIn(ScenarioParams()),
                         [](const auto& test) {
                           std::string name = absl::StrJoin(test.param.args, "_");
                           name = absl::StrReplaceAll(name, {{"-", ""}, {",", ""}, {";", "_"}});
                           return absl::StrCat(name, "_", test.param.world.Name());
                         });

// --- Mismatches -----------------------------------------------------------

class MultiNodeMismatchTest : public ::testing::TestWithParam<MismatchParam> {};

TEST_P(MultiNodeMismatchTest, EveryRankOnEveryNodeGetsTheErrorNamingGlobalRanks) {
  MismatchParam param = GetParam();
  const World world = kThreeNodesTcp;
  param.clients = world.size();
  std::unique_ptr<MpiDaemons> daemons = StartDaemons(world);
  ASSERT_NE(daemons, nullptr);
  auto workers = daemons->StartWorkers(
      CollectivesWorkerBinary(), world.local_sizes,
      {"mismatch", "--collective", param.collective, "--kind", param.kind, "--across-nodes"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  // The scenario itself checks every collective after the mismatch.
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");
  std::string expected = ExpectedMismatch(param);
  if (param.kind == "group") expected += ExpectedMismatch(param, "bad.partner");
  for (size_t rank = 0; rank < workers->size(); ++rank) {
    EXPECT_EQ((*workers)[rank].Stdout(), expected) << "rank " << rank;
  }
  ExpectCleanWorld(*daemons, /*errors_expected=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, MultiNodeMismatchTest,
    ::testing::Values(MismatchParam{"allreduce", "shape", 0}, MismatchParam{"allreduce", "op", 0},
                      MismatchParam{"allreduce", "group", 0},
                      MismatchParam{"allgather", "dtype", 0}, MismatchParam{"broadcast", "root", 0},
                      MismatchParam{"broadcast", "collective", 0},
                      MismatchParam{"alltoall", "shape", 0},
                      MismatchParam{"reducescatter", "postscale", 0}),
    [](const auto& test) { return absl::StrCat(test.param.collective, "_", test.param.kind); });

// Daemons that disagree on a setting every node must share refuse the job
// on every rank of every node, naming the node and both values. Here node
// 1 tunes and node 0 does not (each daemon's shell expands its own rank).
TEST(MultiNodeSettingsTest, DaemonsThatDisagreeOnTheirSettingsRefuseTheJobOnEveryRank) {
  const World world = kUnequalTcp;
  std::unique_ptr<MpiDaemons> daemons =
      StartDaemons(world, {"--autotune", "$OMPI_COMM_WORLD_RANK"});
  ASSERT_NE(daemons, nullptr);
  auto workers = daemons->StartWorkers(
      TestWorkerBinary(), world.local_sizes,
      {"connect-error", "--expect", "response_cache_capacity 1024, autotune true but node 0 ("});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");
  for (Subprocess& worker : *workers) {
    EXPECT_THAT(worker.Stdout(), HasSubstr("autotune false; the daemons of a job must agree on "
                                           "them"));
  }
}

// Reduce, gather and scatter that disagree (rooted-mismatch: the last rank's
// root, dtype or scatter rows): node 0 finds it with every rank's request,
// and every rank on every node gets the same text.
class MultiNodeRootedMismatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MultiNodeRootedMismatchTest, EveryRankOnEveryNodeGetsTheSameError) {
  const World world = kThreeNodesTcp;
  std::unique_ptr<MpiDaemons> daemons = StartDaemons(world);
  ASSERT_NE(daemons, nullptr);
  auto workers = daemons->StartWorkers(CollectivesWorkerBinary(), world.local_sizes,
                                       {"rooted-mismatch", "--kind", GetParam(), "--across-nodes"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  // The scenario itself checks a reduce, a gather and a scatter after it.
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");
  const std::string first = (*workers)[0].Stdout();
  EXPECT_THAT(first, HasSubstr("error: FAILED_PRECONDITION: Mismatched "));
  const int last = world.size() - 1;
  if (GetParam() == "rows") {
    EXPECT_THAT(first, HasSubstr("ask for [2, 2, 2, 3] rows, 9 in all, but root rank 0 sent 8"));
  } else {
    EXPECT_THAT(first, HasSubstr(absl::StrCat(", rank ", last, " sent ")));
  }
  for (size_t rank = 1; rank < workers->size(); ++rank) {
    EXPECT_EQ((*workers)[rank].Stdout(), first) << "rank " << rank;
  }
  ExpectCleanWorld(*daemons, /*errors_expected=*/true);
}

INSTANTIATE_TEST_SUITE_P(Kinds, MultiNodeRootedMismatchTest,
                         ::testing::Values("root", "dtype", "rows"),
                         [](const auto& test) { return test.param; });

}  // namespace
}  // namespace collective::testing
