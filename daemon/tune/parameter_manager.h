// The autotuner's schedule (as HOROVOD_AUTOTUNE's parameter manager): it
// measures the throughput of the values in force over samples of a few
// training steps, discards the warm-up samples, asks the Bayesian optimizer
// (bayesian_optimizer.h) for the next values to try, and after the last
// trial fixes the best values measured. Every trial is one line of an
// optional CSV log. A training step is recognised by its tensors: a sample
// ends when some tensor recurs for the (steps_per_sample + 1)-th time, so
// that every sample spans whole steps (the gaps between them included)
// however the values split the step into batches.
//
// Which knobs: the fusion threshold always; across nodes also the cycle
// time and the chunk size of transfers (tuned_values.h). The engine feeds
// it on the thread that owns it (the engine thread): on one node the
// engine's, across nodes node 0's, whose values travel with its decisions.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "daemon/tune/bayesian_optimizer.h"
#include "daemon/tune/tuned_values.h"

namespace collective::daemon::tune {

class ParameterManager {
 public:
  struct Options {
    // Samples measured and discarded first (the job's first steps are
    // slow: page faults, allocations, caches filling).
    int warmup_samples = 3;
    // Training steps per sample.
    int steps_per_sample = 10;
    // Trials (samples scored) before the best values are fixed.
    int max_samples = 20;
    // Also tune the cycle time and the cross-node chunk size.
    bool across_nodes = false;
    // Largest fusion threshold to try (the result segment bounds it).
    uint64_t max_fusion_bytes = 256ull << 20;
    uint64_t seed = 1;
    // CSV of every trial; empty: none.
    std::string log_file;
  };

  // Fails only when the log file cannot be opened.
  static absl::StatusOr<std::unique_ptr<ParameterManager>> Create(const Options& options,
                                                                  const TunedValues& initial);

  // A batch of `tensors` (each named with its process set, e.g. "0/grad.7")
  // completed at `now`, having reduced `bytes`. Returns the values to put in
  // force when they change.
  std::optional<TunedValues> Update(const std::vector<std::string>& tensors, uint64_t bytes,
                                    Clock::time_point now);

  // Still trying values (false once the best are fixed).
  bool tuning() const { return tuning_; }
  // The trial being measured, from 1 (0 while warming up; the last once
  // the best values are fixed), and how many there are.
  int trial() const {
    if (warmup_left_ > 0) return 0;
    return std::min(static_cast<int>(trials_.size()) + 1, std::max(options_.max_samples, 1));
  }
  int max_samples() const { return options_.max_samples; }
  // Best score so far in bytes per second (0 before the first trial).
  double best_score() const { return best_score_; }
  const TunedValues& values() const { return values_; }

 private:
  ParameterManager(const Options& options, const TunedValues& initial, std::ofstream log);

  // The knob space: [0, 1] per dimension, to values and back.
  TunedValues ToValues(const std::vector<double>& point) const;
  std::vector<double> ToPoint(const TunedValues& values) const;
  // A sample of the values in force scored `score`: the next values.
  std::optional<TunedValues> Scored(double score);
  void Log(const std::string& trial, const TunedValues& values, double score);

  const Options options_;
  BayesianOptimizer optimizer_;
  std::ofstream log_;
  TunedValues values_;
  bool tuning_ = true;
  int warmup_left_;
  struct Trial {
    TunedValues values;
    double score;
  };
  std::vector<Trial> trials_;
  double best_score_ = 0;

  // The sample being measured.
  bool started_ = false;
  Clock::time_point sample_start_{};
  uint64_t sample_bytes_ = 0;
  absl::flat_hash_map<std::string, int> seen_;
};

}  // namespace collective::daemon::tune
