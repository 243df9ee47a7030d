// daemon/tune/parameter_manager: warm-up samples are discarded, a sample
// spans whole training steps, every trial is a line of the log, and the
// best measured values are fixed once the budget is spent.
#include "daemon/tune/parameter_manager.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/common/csv_rows.h"

namespace collective::daemon::tune {
namespace {

using ::collective::testing::ReadCsvRows;

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1ull << 20;

// A training job in simulated time: every step reduces `tensors` tensors
// of `tensor_bytes`, fused into batches up to the threshold; a batch costs
// a fixed overhead plus its bytes at a bandwidth, and a step also computes.
// Throughput peaks at a threshold that balances overhead and overlap: here
// a batch whose size exceeds 8 MiB also pays for it (it no longer overlaps
// the backward pass).
class SimulatedJob {
 public:
  explicit SimulatedJob(ParameterManager& tuner) : tuner_(tuner) {}

  // Runs one step with the tuner's values in force; returns how many times
  // the values changed.
  int Step() {
    int changes = 0;
    const uint64_t threshold = tuner_.values().fusion_threshold_bytes;
    now_ += std::chrono::milliseconds(5);  // forward pass
    std::vector<std::string> batch;
    uint64_t bytes = 0;
    auto flush = [&] {
      const double seconds = 50e-6 + static_cast<double>(bytes) / 10e9 +
                             (bytes > 8 * kMiB ? static_cast<double>(bytes) / 5e9 : 0.0);
      now_ += std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
      if (tuner_.Update(batch, bytes, now_).has_value()) ++changes;
      batch.clear();
      bytes = 0;
    };
    for (int i = 0; i < kTensors; ++i) {
      if (!batch.empty() && bytes + kTensorBytes > threshold) flush();
      batch.push_back(absl::StrCat("0/grad.", i));
      bytes += kTensorBytes;
    }
    flush();
    return changes;
  }

 private:
  static constexpr int kTensors = 64;
  static constexpr uint64_t kTensorBytes = 512 << 10;
  ParameterManager& tuner_;
  Clock::time_point now_{};
};

std::string TempPath() {
  return absl::StrCat(::testing::TempDir(), "/autotune_", getpid(), "_",
                      ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".csv");
}

TEST(ParameterManagerTest, DiscardsWarmupLogsEveryTrialAndFixesTheBest) {
  const std::string log = TempPath();
  const TunedValues initial{
      .fusion_threshold_bytes = 64 * kMiB, .cycle_time_ms = 1, .cross_node_chunk_bytes = 4 * kMiB};
  auto tuner = ParameterManager::Create(
      {.warmup_samples = 2, .steps_per_sample = 3, .max_samples = 8, .seed = 5, .log_file = log},
      initial);
  ASSERT_TRUE(tuner.ok()) << tuner.status();
  SimulatedJob job(**tuner);

  // Warm-up: two samples of three steps, and the first step of the third
  // sample (a sample ends when a tensor starts the step after its last).
  EXPECT_EQ((*tuner)->trial(), 0);
  int changes = 0;
  for (int step = 0; step < 7; ++step) changes += job.Step();
  EXPECT_EQ(changes, 0);
  EXPECT_EQ((*tuner)->values(), initial);
  EXPECT_EQ((*tuner)->trial(), 1);
  EXPECT_EQ(ReadCsvRows(log).size(), 1u) << "only the header: warm-up samples are not trials";

  for (int step = 0; step < 3 * 8 && (*tuner)->tuning(); ++step) changes += job.Step();
  EXPECT_FALSE((*tuner)->tuning());
  EXPECT_GT(changes, 0);

  const std::vector<std::vector<std::string>> rows = ReadCsvRows(log);
  ASSERT_EQ(rows.size(), 1u + 8u + 1u);  // header, trials, best
  EXPECT_EQ(rows[0][0], "trial");
  EXPECT_EQ(rows[0][1], "fusion_threshold_bytes");
  EXPECT_EQ(rows[0][4], "score_bytes_per_second");
  // The first trial measures the configured values.
  EXPECT_EQ(rows[1][0], "1");
  EXPECT_EQ(rows[1][1], absl::StrCat(64 * kMiB));
  uint64_t best_score = 0;
  std::string best_threshold;
  for (size_t row = 1; row <= 8; ++row) {
    EXPECT_EQ(rows[row][0], absl::StrCat(row));
    const uint64_t score = std::stoull(rows[row][4]);
    EXPECT_GT(score, 0u);
    if (score > best_score) {
      best_score = score;
      best_threshold = rows[row][1];
    }
  }
  EXPECT_EQ(rows[9][0], "best");
  EXPECT_EQ(rows[9][1], best_threshold);
  EXPECT_EQ(std::stoull(rows[9][4]), best_score);
  EXPECT_EQ(absl::StrCat((*tuner)->values().fusion_threshold_bytes), best_threshold);
  // At or below 8 MiB batches overlap; the default 64 MiB does not.
  EXPECT_LE((*tuner)->values().fusion_threshold_bytes, 8 * kMiB);

  // Fixed: later steps change nothing and write nothing.
  const TunedValues fixed = (*tuner)->values();
  for (int step = 0; step < 20; ++step) EXPECT_EQ(job.Step(), 0);
  EXPECT_EQ((*tuner)->values(), fixed);
  EXPECT_EQ(ReadCsvRows(log).size(), 10u);
  std::remove(log.c_str());
}

TEST(ParameterManagerTest, OnOneNodeOnlyTheFusionThresholdMoves) {
  const TunedValues initial{
      .fusion_threshold_bytes = 64 * kMiB, .cycle_time_ms = 3, .cross_node_chunk_bytes = 4 * kMiB};
  auto tuner = ParameterManager::Create(
      {.warmup_samples = 0, .steps_per_sample = 1, .max_samples = 6, .seed = 9}, initial);
  ASSERT_TRUE(tuner.ok());
  SimulatedJob job(**tuner);
  for (int step = 0; step < 20 && (*tuner)->tuning(); ++step) job.Step();
  EXPECT_FALSE((*tuner)->tuning());
  EXPECT_EQ((*tuner)->values().cycle_time_ms, 3u);
  EXPECT_EQ((*tuner)->values().cross_node_chunk_bytes, 4 * kMiB);
}

TEST(ParameterManagerTest, AcrossNodesTheCycleTimeAndChunkSizeStayInTheirRanges) {
  const TunedValues initial{
      .fusion_threshold_bytes = 64 * kMiB, .cycle_time_ms = 1, .cross_node_chunk_bytes = 4 * kMiB};
  auto tuner = ParameterManager::Create({.warmup_samples = 0,
                                         .steps_per_sample = 1,
                                         .max_samples = 10,
                                         .across_nodes = true,
                                         .max_fusion_bytes = 32 * kMiB,
                                         .seed = 2},
                                        initial);
  ASSERT_TRUE(tuner.ok());
  SimulatedJob job(**tuner);
  bool moved = false;
  for (int step = 0; step < 30 && (*tuner)->tuning(); ++step) {
    job.Step();
    const TunedValues& values = (*tuner)->values();
    moved = moved || values.cycle_time_ms != 1 || values.cross_node_chunk_bytes != 4 * kMiB;
    EXPECT_GE(values.cycle_time_ms, 1u);
    EXPECT_LE(values.cycle_time_ms, 10u);
    EXPECT_GE(values.cross_node_chunk_bytes, 256u << 10);
    EXPECT_LE(values.cross_node_chunk_bytes, 64 * kMiB);
    EXPECT_EQ(values.cross_node_chunk_bytes % 4096, 0u);
    if ((*tuner)->trial() > 1) {
      EXPECT_LE(values.fusion_threshold_bytes, 32 * kMiB);
    }
  }
  EXPECT_TRUE(moved);
  EXPECT_FALSE((*tuner)->tuning());
}

TEST(ParameterManagerTest, ALogFileThatCannotBeOpenedIsAnError) {
  auto tuner = ParameterManager::Create({.log_file = "/nonexistent-directory/autotune.csv"}, {});
  ASSERT_FALSE(tuner.ok());
  EXPECT_THAT(tuner.status().message(), HasSubstr("/nonexistent-directory/autotune.csv"));
}

}  // namespace
}  // namespace collective::daemon::tune
