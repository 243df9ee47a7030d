// Autotuning across nodes, with daemons under a real `mpirun` and real
// client processes: node 0 tunes and its values travel with its decisions,
// so every node ends with the same values in force (and every result of
// the steps that ran while they moved is right: the workers check them).
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/common/csv_rows.h"
#include "tests/integration/collectives_job.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/multinode/mpi_daemons.h"

namespace collective::testing {
namespace {

TEST(MultiNodeAutotuneTest, EveryNodeEndsWithNodeZerosBestValues) {
  constexpr int kTrials = 4;
  const std::string log =
      absl::StrCat(::testing::TempDir(), "/multinode_autotune_", getpid(), ".csv");
  auto daemons = MpiDaemons::Start(
      {.nodes = 2,
       .daemon_flags = {"--autotune", "true", "--autotune-log-file", log,
                        "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "5",
                        "--autotune-bayes-opt-max-samples", absl::StrCat(kTrials)}});
  ASSERT_TRUE(daemons.ok()) << daemons.status();
  // (1 warm-up + 4 trials) × 5 steps end well before 80 steps do.
  auto workers =
      (*daemons)->StartWorkers(CollectivesWorkerBinary(), {2, 1},
                               {"repeat", "--steps", "80", "--tensors", "8", "--across-nodes"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, absl::Seconds(240)), "");

  const std::vector<std::vector<std::string>> rows = ReadCsvRows(log);
  ASSERT_EQ(rows.size(), 1u + kTrials + 1u) << "only node 0 writes the log, once";
  ASSERT_EQ(rows.back()[0], "best");
  for (int node = 0; node < 2; ++node) {
    SCOPED_TRACE(absl::StrCat("node ", node));
    const auto status = QueryStatus((*daemons)->socket(node));
    ASSERT_TRUE(status.ok()) << status.status();
    const v1::AutotuneStatus& tune = status->autotune();
    EXPECT_TRUE(tune.enabled());
    EXPECT_FALSE(tune.tuning());
    EXPECT_EQ(absl::StrCat(tune.fusion_threshold_bytes()), rows.back()[1]);
    EXPECT_EQ(absl::StrCat(tune.cycle_time_ms()), rows.back()[2]);
    EXPECT_EQ(absl::StrCat(tune.cross_node_chunk_bytes()), rows.back()[3]);
  }
  EXPECT_TRUE(ExitedCleanly((*daemons)->Stop())) << (*daemons)->mpirun().Stderr();
  std::remove(log.c_str());
}

}  // namespace
}  // namespace collective::testing
