// Bayesian optimization of a noisy function over the unit cube [0, 1]^d:
// the autotuner's search (as HOROVOD_AUTOTUNE's). Every observed score
// refits a Gaussian process (gaussian_process.h); the next point to try is
// the one of greatest expected improvement over the best score so far,
// found among random candidates and perturbations of the most promising
// ones. Seeded, so that a run (and a test) is reproducible. Not
// thread-safe; the engine thread owns it.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "daemon/tune/gaussian_process.h"

namespace collective::daemon::tune {

class BayesianOptimizer {
 public:
  struct Options {
    int dimensions = 1;
    uint64_t seed = 1;
    GaussianProcess::Options model;
    // Exploration margin of the expected improvement, in units of the
    // scores' standard deviation: larger explores more.
    double exploration = 0.1;
    // Random candidates scored per proposal.
    int candidates = 1000;
  };

  explicit BayesianOptimizer(Options options);

  // `score` (larger is better) was measured at `point`.
  void Observe(std::vector<double> point, double score);

  // The next point to measure: a random one until two scores are known,
  // then the maximiser of the expected improvement.
  std::vector<double> Propose();

  // The best observed point and its score (a point of zeros and 0 before
  // any observation).
  const std::vector<double>& best_point() const { return best_point_; }
  double best_score() const { return best_score_; }
  int observations() const { return static_cast<int>(scores_.size()); }

 private:
  std::vector<double> RandomPoint();
  double ExpectedImprovement(const std::vector<double>& point) const;

  Options options_;
  std::mt19937_64 random_;
  GaussianProcess model_;
  std::vector<std::vector<double>> points_;
  std::vector<double> scores_;
  std::vector<double> best_point_;
  double best_score_ = 0;
  // The largest posterior mean at an observed point (Propose).
  double incumbent_ = 0;
};

}  // namespace collective::daemon::tune
