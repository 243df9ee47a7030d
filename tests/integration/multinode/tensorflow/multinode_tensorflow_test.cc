// collective.tensorflow across nodes: the pytest suite of tests/tensorflow,
// run by TensorFlow trainers against two daemons under a real `mpirun`, one
// per stand-in node, with unequal local sizes (2 + 1 ranks) over TCP. Every
// rank runs the same session, as under collectiverun on one node; the ops,
// DistributedGradientTape, the Keras optimizer and callbacks, and the
// training parity must hold as they do there.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "tests/integration/daemon_process.h"
#include "tests/integration/multinode/mpi_daemons.h"

namespace collective::testing {
namespace {

TEST(MultiNodeTensorFlowTest, ThePytestSuitePassesOnEveryRankOfTwoNodes) {
  // The trainers inherit these: the package from the build tree, no bytecode
  // written into the source tree, and no TensorFlow start-up notices.
  ASSERT_EQ(setenv("PYTHONPATH", PYTHON_PACKAGE_DIR, 1), 0);
  ASSERT_EQ(setenv("PYTHONDONTWRITEBYTECODE", "1", 1), 0);
  ASSERT_EQ(setenv("TF_CPP_MIN_LOG_LEVEL", "2", 1), 0);
  auto daemons = MpiDaemons::Start({.nodes = 2, .btl = "tcp,self", .daemon_flags = {}});
  ASSERT_TRUE(daemons.ok()) << daemons.status();
  auto workers = (*daemons)->StartWorkers(
      TENSORFLOW_PYTHON, {2, 1}, {"-m", "pytest", "-q", "-p", "no:cacheprovider", TESTS_DIR});
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, absl::Minutes(8)), "");
}

}  // namespace
}  // namespace collective::testing
