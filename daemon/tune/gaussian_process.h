// A Gaussian process regressor over points of the unit cube: the surrogate
// model of the autotuner's Bayesian optimization (bayesian_optimizer.h). A
// squared-exponential kernel, observations with Gaussian noise, and a
// Cholesky factorisation written out by hand (the systems are as small as
// the number of trials, a few dozen). Scores are standardised before the
// fit, so one length scale and one noise level suit any unit of throughput.
// Not thread-safe; the engine thread owns the tuner that owns it.
#pragma once

#include <vector>

namespace collective::daemon::tune {

class GaussianProcess {
 public:
  struct Options {
    // Distance in the unit cube over which scores stay correlated.
    double length_scale = 0.15;
    // Variance of the measurement noise, relative to the scores' variance:
    // throughput measured over a few steps is noisy.
    double noise = 0.1;
  };

  explicit GaussianProcess(Options options) : options_(options) {}

  // Conditions the model on `y[i]` observed at `x[i]` (every point of the
  // same dimension, each coordinate in [0, 1]); replaces any earlier fit.
  void Fit(std::vector<std::vector<double>> x, std::vector<double> y);

  struct Prediction {
    double mean = 0;
    double stddev = 0;
  };
  // The posterior at `point`, in the scores' own units.
  Prediction Predict(const std::vector<double>& point) const;
  // The spread of the scores fitted (their standard deviation, or a
  // positive stand-in when they are all equal).
  double scale() const { return y_scale_; }

 private:
  double Kernel(const std::vector<double>& a, const std::vector<double>& b) const;

  Options options_;
  std::vector<std::vector<double>> x_;
  double y_mean_ = 0;
  double y_scale_ = 1;
  // Lower-triangular factor L of K + noise·I (row-major, n×n), and
  // alpha = (K + noise·I)⁻¹ (y - mean) / scale.
  std::vector<double> factor_;
  std::vector<double> alpha_;
};

}  // namespace collective::daemon::tune
