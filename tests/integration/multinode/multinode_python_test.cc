// collective.torch across nodes: the whole pytest suite of tests/python, run
// by real Python trainers against daemons under a real `mpirun`, one per
// stand-in node, with unequal local sizes, over TCP and over shared memory.
// Every rank runs the same session, as under collectiverun on one node; the
// collectives, autograd, DistributedOptimizer (its training parity
// included), process sets, join and the errors must hold as they do there.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/multinode/mpi_daemons.h"

namespace collective::testing {
namespace {

struct PythonCase {
  std::vector<int> local_sizes;
  std::string btl;
};

void PrintTo(const PythonCase& c, std::ostream* os) {
  *os << "local sizes [" << absl::StrJoin(c.local_sizes, ", ") << "] over " << c.btl;
}

class MultiNodePythonTest : public ::testing::TestWithParam<PythonCase> {};

// One pytest file run by every rank, on daemons of `local_sizes` ranks.
void RunPytestFile(const std::vector<int>& local_sizes, const std::string& btl,
                   const std::string& file) {
  ASSERT_EQ(setenv("PYTHONPATH", PYTHON_PACKAGE_DIR, 1), 0);
  ASSERT_EQ(setenv("PYTHONDONTWRITEBYTECODE", "1", 1), 0);
  auto daemons = MpiDaemons::Start(
      {.nodes = static_cast<int>(local_sizes.size()), .btl = btl, .daemon_flags = {}});
  ASSERT_TRUE(daemons.ok()) << daemons.status();
  auto workers = (*daemons)->StartWorkers(PYTHON_EXECUTABLE, local_sizes,
                                          {"-m", "pytest", "-q", "-p", "no:cacheprovider", file});
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, absl::Minutes(4)), "");
}

TEST_P(MultiNodePythonTest, ThePytestSuitePassesOnEveryRankOfEveryNode) {
  const PythonCase& c = GetParam();
  // The trainers inherit these: the package from the build tree, and no
  // bytecode written into the source tree.
  ASSERT_EQ(setenv("PYTHONPATH", PYTHON_PACKAGE_DIR, 1), 0);
  ASSERT_EQ(setenv("PYTHONDONTWRITEBYTECODE", "1", 1), 0);
  auto daemons = MpiDaemons::Start(
      {.nodes = static_cast<int>(c.local_sizes.size()), .btl = c.btl, .daemon_flags = {}});
  ASSERT_TRUE(daemons.ok()) << daemons.status();
  auto workers =
      (*daemons)->StartWorkers(PYTHON_EXECUTABLE, c.local_sizes,
                               {"-m", "pytest", "-q", "-p", "no:cacheprovider", PYTHON_TESTS_DIR});
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, absl::Minutes(4)), "");
}

// Adasum across nodes needs as many ranks on every node, which neither
// world above has: its tests on 2 nodes of 2 ranks each, where the daemons
// combine the nodes' partial results.
TEST(MultiNodeAdasumTest, TheAdasumTestsPassOnTwoNodesOfTwoRanks) {
  RunPytestFile({2, 2}, "vader,self", PYTHON_TESTS_DIR "/test_adasum.py");
}

// Point-to-point messages between ranks of different nodes: the binding's
// tests (its rings go round every rank, so messages cross nodes),
// collective.mpi4torch's point-to-point functions and adjoints, and its
// examples (the Isend/Recv/Wait ring), on nodes of 1 and 2 ranks and on
// three nodes of one rank.
struct PointToPointCase {
  std::vector<int> local_sizes;
  std::string file;
};

void PrintTo(const PointToPointCase& c, std::ostream* os) {
  *os << c.file << " on local sizes [" << absl::StrJoin(c.local_sizes, ", ") << "]";
}

class MultiNodePointToPointTest : public ::testing::TestWithParam<PointToPointCase> {};

TEST_P(MultiNodePointToPointTest, MessagesCrossNodesInEveryPytestOfThem) {
  RunPytestFile(GetParam().local_sizes, "tcp,self",
                absl::StrCat(PYTHON_TESTS_DIR, "/", GetParam().file, ".py"));
}

INSTANTIATE_TEST_SUITE_P(
    Files, MultiNodePointToPointTest,
    ::testing::Values(PointToPointCase{{1, 2}, "test_p2p_binding"},
                      PointToPointCase{{1, 2}, "test_mpi4torch_point_to_point"},
                      PointToPointCase{{1, 1, 1}, "test_mpi4torch_point_to_point"},
                      PointToPointCase{{1, 2}, "test_mpi4torch_examples"}),
    [](const ::testing::TestParamInfo<PointToPointCase>& param) {
      return absl::StrCat(param.param.file, "_", absl::StrJoin(param.param.local_sizes, "_"));
    });

INSTANTIATE_TEST_SUITE_P(Worlds, MultiNodePythonTest,
                         ::testing::Values(PythonCase{{1, 2}, "tcp,self"},
                                           PythonCase{{2, 1, 1}, "vader,self"}),
                         [](const ::testing::TestParamInfo<PythonCase>& param) {
                           return absl::StrCat(
                               absl::StrJoin(param.param.local_sizes, "_"), "_",
                               param.param.btl == "tcp,self" ? "Tcp" : "SharedMemory");
                         });

}  // namespace
}  // namespace collective::testing
