// Autotuning against a real daemon and real clients: with autotune on, the
// knob values in collectivectl status move while trials run, every trial
// is a line of the log file, and the job ends with the best values fixed.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/common/csv_rows.h"
#include "tests/integration/collectives_job.h"

namespace collective::testing {
namespace {

TEST(AutotuneTest, TrialsMoveTheFusionThresholdAndTheBestIsFixed) {
  constexpr int kTrials = 4;
  const std::string log = absl::StrCat(::testing::TempDir(), "/autotune_", getpid(), ".csv");
  auto started = DaemonProcess::Start(
      {.flags = {"--autotune", "true", "--autotune-log-file", log, "--autotune-warmup-samples", "1",
                 "--autotune-steps-per-sample", "20", "--autotune-bayes-opt-max-samples",
                 absl::StrCat(kTrials)}});
  ASSERT_TRUE(started.ok()) << started.status();
  DaemonProcess& tuned = **started;

  // Before any job: on, nothing tried yet, the configured values in force.
  auto idle = tuned.Status();
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_TRUE(idle->autotune().enabled());
  EXPECT_FALSE(idle->autotune().tuning());
  EXPECT_EQ(idle->autotune().fusion_threshold_bytes(), 64u << 20);
  const CommandResult before = RunCollectivectl(tuned.socket(), {"status"});
  ASSERT_EQ(before.exit_code, 0) << before.err;
  EXPECT_TRUE(absl::StrContains(before.out, "autotune: on, no job tuned yet;")) << before.out;

  // (1 warm-up + 4 trials) × 20 steps end well before 600 steps do.
  auto workers = tuned.StartWorkers(CollectivesWorkerBinary(), 2,
                                    {"repeat", "--steps", "600", "--tensors", "8"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  // Trial 2 or later, or, on a machine too busy for this test to look in
  // time, the values fixed after the last trial.
  auto trying = tuned.AwaitStatus(
      [](const v1::StatusResponse& status) { return status.autotune().trial() >= 2; },
      absl::Seconds(120));
  ASSERT_TRUE(trying.ok()) << trying.status();
  EXPECT_EQ(trying->autotune().max_trials(), kTrials);
  const uint64_t tried = trying->autotune().fusion_threshold_bytes();

  EXPECT_EQ(WaitForWorkers(*workers, absl::Seconds(180)), "");
  auto done = tuned.AwaitStatus(
      [](const v1::StatusResponse& status) { return !status.autotune().tuning(); },
      absl::Seconds(30));
  ASSERT_TRUE(done.ok()) << done.status();

  // The log: a header, one line per trial (the first the configured
  // values), then the best, which status shows in force.
  const std::vector<std::vector<std::string>> rows = ReadCsvRows(log);
  ASSERT_EQ(rows.size(), 1u + kTrials + 1u) << tuned.process().Stderr();
  EXPECT_EQ(rows[1][1], absl::StrCat(64u << 20));
  bool tried_is_a_trial = false;
  uint64_t best = 0;
  for (int trial = 1; trial <= kTrials; ++trial) {
    EXPECT_EQ(rows[trial][0], absl::StrCat(trial));
    tried_is_a_trial = tried_is_a_trial || rows[trial][1] == absl::StrCat(tried);
    best = std::max<uint64_t>(best, std::stoull(rows[trial][4]));
  }
  EXPECT_TRUE(tried_is_a_trial) << "status showed " << tried << " in trial "
                                << trying->autotune().trial();
  EXPECT_NE(rows[2][1], rows[1][1]) << "the second trial tries other values";
  ASSERT_EQ(rows.back()[0], "best");
  EXPECT_EQ(std::stoull(rows.back()[4]), best);
  EXPECT_EQ(absl::StrCat(done->autotune().fusion_threshold_bytes()), rows.back()[1]);
  EXPECT_GT(done->autotune().best_bytes_per_second(), 0);

  const CommandResult text = RunCollectivectl(tuned.socket(), {"status"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(absl::StrContains(text.out, "autotune: on, values fixed; fusion threshold "))
      << text.out;
  ExpectCleanStop(tuned);
  std::remove(log.c_str());
}

TEST(AutotuneTest, OffByDefaultAndStatusShowsTheConfiguredValues) {
  auto daemon = DaemonProcess::Start({.flags = {"--fusion-threshold-bytes", "1MiB"}});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_FALSE(status->autotune().enabled());
  EXPECT_FALSE(status->autotune().tuning());
  EXPECT_EQ(status->autotune().fusion_threshold_bytes(), 1u << 20);
  EXPECT_EQ(status->autotune().cycle_time_ms(), 1u);
  EXPECT_EQ(status->autotune().cross_node_chunk_bytes(), 4u << 20);
  EXPECT_TRUE(status->autotune().response_cache());
  const CommandResult text = RunCollectivectl((*daemon)->socket(), {"status"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(absl::StrContains(text.out, "autotune: off; fusion threshold 1.0 MiB")) << text.out;
  ExpectCleanStop(**daemon);
}

}  // namespace
}  // namespace collective::testing
