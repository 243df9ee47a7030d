// Allreduce with a real daemon and 1, 2, 4 and 8 real client processes: every
// op x dtype at sizes 0, 1, 7, 4096+3 elements and larger than the fusion
// threshold, inputs and outputs in private memory, in the arena and in place,
// each result checked bitwise against the reference reduction. In the async
// form every request is outstanding at once, so the daemon fuses. The
// doorbell runs force the engine's portable sleep (engine_wait: doorbell,
// set through the environment) that kernels without futex_waitv get.
#include <ostream>

#include <gtest/gtest.h>

#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

constexpr char kFusionThreshold[] = "65536";

struct MatrixParam {
  int clients;
  bool async;
  bool doorbell = false;
};

void PrintTo(const MatrixParam& param, std::ostream* os) {
  *os << param.clients << " clients" << (param.async ? ", asynchronous" : "")
      << (param.doorbell ? ", engine on the doorbell" : "");
}

class AllreduceMatrixTest : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(AllreduceMatrixTest, EveryOpAndDtypeMatchesTheReference) {
  const MatrixParam param = GetParam();
  DaemonProcess::Options options = {.flags = {"--fusion-threshold-bytes", kFusionThreshold,
                                              "--default-arena-bytes", "64MiB",
                                              "--result-arena-bytes", "64MiB"}};
  if (param.doorbell) options.environment["COLLECTIVED_ENGINE_WAIT"] = "doorbell";
  auto daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::vector<std::string> args = {"matrix", "--big-bytes", kFusionThreshold};
  if (param.async) args.push_back("--async");
  auto workers = (*daemon)->StartWorkers(TestWorkerBinary(), param.clients, args);
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, absl::Seconds(240)), "");
  for (auto& worker : *workers) EXPECT_NE(worker.Stdout().find("ok "), std::string::npos);

  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().errors(), 0u);
  EXPECT_GT(status->totals().collectives(), 200u);
  if (param.async) {
    // Outstanding small tensors of the same kind travel together.
    EXPECT_LT(status->totals().fused_batches(), status->totals().collectives());
  }
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  EXPECT_TRUE((*daemon)->Segments().empty());
  if (param.doorbell) {
    EXPECT_NE((*daemon)->process().Stderr().find("engine sleeps on each job's doorbell"),
              std::string::npos)
        << (*daemon)->process().Stderr();
  }
}

INSTANTIATE_TEST_SUITE_P(Clients, AllreduceMatrixTest,
                         ::testing::Values(MatrixParam{1, false}, MatrixParam{2, false},
                                           MatrixParam{4, false}, MatrixParam{8, false},
                                           MatrixParam{2, true}, MatrixParam{4, true},
                                           MatrixParam{8, true}, MatrixParam{4, false, true},
                                           MatrixParam{8, true, true}),
                         [](const auto& test_info) {
                           return std::to_string(test_info.param.clients) + "Clients" +
                                  (test_info.param.async ? "Async" : "Sync") +
                                  (test_info.param.doorbell ? "Doorbell" : "");
                         });

}  // namespace
}  // namespace collective::testing
