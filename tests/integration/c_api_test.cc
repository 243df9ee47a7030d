// libcollective's C ABI end to end: two ranks written in C (c_api_worker.c)
// allreduce through a real daemon and check their results and error paths.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

class CApiTest : public ::testing::TestWithParam<int> {};

TEST_P(CApiTest, EveryCollectiveAndRefusedCalls) {
  const int ranks = GetParam();
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto workers = (*daemon)->StartWorkers(C_API_WORKER_BINARY, ranks, {});
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, absl::Seconds(30)), "");
  for (size_t rank = 0; rank < workers->size(); ++rank) {
    EXPECT_EQ((*workers)[rank].Stdout(), absl::StrCat("ok rank ", rank, " of ", ranks, "\n"));
  }
  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  // Per job: four allreduces (one into an owned buffer), allgather, broadcast, alltoall,
  // reducescatter, reduce, gather, scatter, two grouped allreduces, barrier, adding a set, an
  // allreduce on it, removing it, join. The refused calls never reached the daemon.
  EXPECT_EQ(status->totals().collectives(), 18u);
  EXPECT_EQ(status->totals().errors(), 0u);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  EXPECT_TRUE((*daemon)->Segments().empty());
}

INSTANTIATE_TEST_SUITE_P(Ranks, CApiTest, ::testing::Values(2, 3),
                         [](const auto& test) { return absl::StrCat(test.param, "Ranks"); });

}  // namespace
}  // namespace collective::testing
