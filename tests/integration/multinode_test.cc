// Several daemons started by a real `mpirun` on this machine, each on its own
// socket directory standing in for a node, with real client processes: the
// job forms across them (global rank = node offset + local rank), allreduce
// of every op and dtype combines the nodes' partial results over MPI (TCP or
// Open MPI's shared-memory transport, equal and unequal local sizes, one at
// a time and fused), and a mismatch is reported with global ranks to every
// rank on every node, after which the job goes on.
#include <ostream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/mpi_daemons.h"

namespace collective::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(120);

struct WorldParam {
  std::vector<int> local_sizes;
  std::string btl;
  bool async = false;
};

void PrintTo(const WorldParam& param, std::ostream* os) {
  *os << "local sizes [" << absl::StrJoin(param.local_sizes, ", ") << "] over " << param.btl
      << (param.async ? ", asynchronous" : "");
}

class MultiNodeTest : public ::testing::TestWithParam<WorldParam> {
 protected:
  void StartWorld(const WorldParam& param) {
    auto daemons = MpiDaemons::Start(
        {.nodes = static_cast<int>(param.local_sizes.size()),
         .btl = param.btl,
         .daemon_flags = {"--default-arena-bytes", "16MiB", "--result-arena-bytes", "64MiB",
                          "--fusion-threshold-bytes", "1MiB"}});
    ASSERT_TRUE(daemons.ok()) << daemons.status();
    daemons_ = std::move(*daemons);
  }

  std::unique_ptr<MpiDaemons> daemons_;
};

TEST_P(MultiNodeTest, AllreduceOfEveryOpAndDtypeAcrossNodes) {
  const WorldParam param = GetParam();
  ASSERT_NO_FATAL_FAILURE(StartWorld(param));
  std::vector<std::string> args = {"matrix", "--across-nodes"};
  if (param.async) args.push_back("--async");
  auto workers = daemons_->StartWorkers(TestWorkerBinary(), param.local_sizes, args);
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");

  // Global ranks follow node order: node offset + local rank.
  int size = 0;
  for (int local : param.local_sizes) size += local;
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_THAT((*workers)[rank].Stdout(),
                HasSubstr(absl::StrCat(" cases on rank ", rank, " of ", size, "\n")));
  }
  for (int node = 0; node < daemons_->nodes(); ++node) {
    const auto status = QueryStatus(daemons_->socket(node));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(status->totals().errors(), 0u) << "node " << node;
    EXPECT_GT(status->totals().collectives(), 0u) << "node " << node;
  }
  EXPECT_TRUE(ExitedCleanly(daemons_->Stop())) << daemons_->mpirun().Stderr();
}

INSTANTIATE_TEST_SUITE_P(Worlds, MultiNodeTest,
                         ::testing::Values(WorldParam{{1, 1}, "tcp,self"},
                                           WorldParam{{1, 2}, "tcp,self"},
                                           WorldParam{{2, 1, 1}, "tcp,self", /*async=*/true},
                                           WorldParam{{2, 2}, "vader,self"}),
                         [](const auto& test) {
                           return absl::StrCat(
                               absl::StrJoin(test.param.local_sizes, "_"), "_",
                               test.param.btl == "tcp,self" ? "Tcp" : "SharedMemory",
                               test.param.async ? "_Async" : "");
                         });

TEST(MultiNodeErrorsTest, AMismatchNamesGlobalRanksOnEveryNodeAndTheJobGoesOn) {
  auto daemons = MpiDaemons::Start({.nodes = 2});
  ASSERT_TRUE(daemons.ok()) << daemons.status();
  // Ranks 0 (node 0), 1 and 2 (node 1); the last rank sends shape [2, 3].
  auto workers =
      (*daemons)->StartWorkers(TestWorkerBinary(), {1, 2}, {"mismatch", "--kind", "shape"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");
  for (Subprocess& worker : *workers) {
    EXPECT_THAT(worker.Stdout(),
                HasSubstr("error: FAILED_PRECONDITION: Mismatched allreduce tensor shapes for "
                          "'bad': rank 0 sent [6], rank 2 sent [2, 3]"));
  }
  EXPECT_TRUE(ExitedCleanly((*daemons)->Stop())) << (*daemons)->mpirun().Stderr();
}

}  // namespace
}  // namespace collective::testing
