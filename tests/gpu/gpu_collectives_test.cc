// The GPU path on a real GPU (ctest label gpu): a real collectived and 2 to 4
// real client processes (collective-gpu-worker) whose tensors live in CUDA
// memory, several sharing one device: every collective, allreduce on every
// dtype and op against a host reference, fusion, and a client killed in the
// middle of an operation, after which the daemon must have no IPC mapping
// open; two jobs on the GPU at once, one of them losing a rank while the
// other's every collective still matches. Skipped where CUDA sees no device.
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/time.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

class GpuCollectivesTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      GTEST_SKIP() << "no CUDA device: the GPU tests need one";
    }
    auto daemon = DaemonProcess::Start({.flags = {"--log-level", "info,nccl=debug"}});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
  }

  // Runs `scenario` on GetParam() ranks; "" when every rank exited 0.
  std::string Run(const std::string& scenario, absl::Duration timeout = absl::Minutes(5)) {
    auto workers = daemon_->StartWorkers(BuiltBinary(GPU_WORKER_BINARY), GetParam(), {scenario});
    if (!workers.ok()) return std::string(workers.status().message());
    return WaitForWorkers(*workers, timeout);
  }

  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_P(GpuCollectivesTest, EveryCollectiveMatchesTheHostReference) {
  EXPECT_EQ(Run("matrix"), "");
  const auto status = daemon_->AwaitStatus(
      [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; },
      absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(status->gpu().built());
  EXPECT_EQ(status->gpu().open_ipc_mappings(), 0u) << "closed when the clients left";
}

TEST_P(GpuCollectivesTest, SmallTensorsAreFused) {
  EXPECT_EQ(Run("fusion"), "");
  const auto status = daemon_->Status();
  ASSERT_TRUE(status.ok());
  EXPECT_LT(status->totals().fused_batches(), status->totals().collectives())
      << "64 tensors submitted before any wait share batches";
}

TEST_P(GpuCollectivesTest, AClientKilledMidOperationFailsTheJobAndLeavesNoMapping) {
  auto workers = daemon_->StartWorkers(BuiltBinary(GPU_WORKER_BINARY), GetParam(), {"kill"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  // The last rank kills itself; the others must see the job fail.
  for (size_t r = 0; r + 1 < workers->size(); ++r) {
    const auto exit = (*workers)[r].Wait(absl::Minutes(3));
    ASSERT_TRUE(exit.has_value()) << "rank " << r << " hangs";
    EXPECT_EQ(*exit, 0) << "rank " << r << ": " << (*workers)[r].Stderr();
  }
  const auto status = daemon_->AwaitStatus(
      [](const v1::StatusResponse& s) {
        return s.job().state() == v1::JOB_STATE_IDLE && s.gpu().open_ipc_mappings() == 0;
      },
      absl::Minutes(6));  // gpu_timeout_seconds bounds a stuck batch
  EXPECT_TRUE(status.ok()) << status.status();
}

// Two jobs use the GPU path at once, each with its own NCCL communicators
// and streams: the one whose rank is killed fails alone, and the other's
// every collective still matches the host reference.
TEST_P(GpuCollectivesTest, TwoJobsAtOnceAndOnesKilledRankLeavesTheOtherAlone) {
  auto doomed = daemon_->StartWorkers(BuiltBinary(GPU_WORKER_BINARY), GetParam(), {"kill"},
                                      {{"COLLECTIVE_JOB_ID", "doomed"}});
  ASSERT_TRUE(doomed.ok()) << doomed.status();
  auto survivor = daemon_->StartWorkers(BuiltBinary(GPU_WORKER_BINARY), GetParam(), {"matrix"},
                                        {{"COLLECTIVE_JOB_ID", "survivor"}});
  ASSERT_TRUE(survivor.ok()) << survivor.status();
  for (size_t r = 0; r + 1 < doomed->size(); ++r) {
    const auto exit = (*doomed)[r].Wait(absl::Minutes(3));
    ASSERT_TRUE(exit.has_value()) << "rank " << r << " of the doomed job hangs";
    EXPECT_EQ(*exit, 0) << "rank " << r << ": " << (*doomed)[r].Stderr();
  }
  EXPECT_EQ(WaitForWorkers(*survivor, absl::Minutes(5)), "") << "the other job was harmed";
  const auto status = daemon_->AwaitStatus(
      [](const v1::StatusResponse& s) {
        return s.jobs_size() == 0 && s.gpu().open_ipc_mappings() == 0;
      },
      absl::Minutes(6));  // gpu_timeout_seconds bounds a stuck batch
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().jobs(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Ranks, GpuCollectivesTest, ::testing::Values(2, 3, 4),
                         [](const auto& param_info) {
                           return std::to_string(param_info.param) + "Ranks";
                         });

}  // namespace
}  // namespace collective::testing
