#include "daemon/tune/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>

namespace collective::daemon::tune {
namespace {

// Solves L·z = b in place (L lower-triangular, row-major n×n).
void ForwardSubstitute(const std::vector<double>& factor, std::vector<double>& b) {
  const size_t n = b.size();
  for (size_t i = 0; i < n; ++i) {
    double sum = b[i];
    for (size_t k = 0; k < i; ++k) sum -= factor[i * n + k] * b[k];
    b[i] = sum / factor[i * n + i];
  }
}

// Solves Lᵀ·z = b in place.
void BackSubstitute(const std::vector<double>& factor, std::vector<double>& b) {
  const size_t n = b.size();
  for (size_t i = n; i-- > 0;) {
    double sum = b[i];
    for (size_t k = i + 1; k < n; ++k) sum -= factor[k * n + i] * b[k];
    b[i] = sum / factor[i * n + i];
  }
}

}  // namespace

double GaussianProcess::Kernel(const std::vector<double>& a, const std::vector<double>& b) const {
  double squared = 0;
  for (size_t d = 0; d < a.size(); ++d) squared += (a[d] - b[d]) * (a[d] - b[d]);
  return std::exp(-squared / (2 * options_.length_scale * options_.length_scale));
}

void GaussianProcess::Fit(std::vector<std::vector<double>> x, std::vector<double> y) {
  x_ = std::move(x);
  const size_t n = y.size();
  y_mean_ = 0;
  for (const double value : y) y_mean_ += value;
  y_mean_ = n > 0 ? y_mean_ / static_cast<double>(n) : 0;
  double variance = 0;
  for (const double value : y) variance += (value - y_mean_) * (value - y_mean_);
  variance = n > 1 ? variance / static_cast<double>(n - 1) : 0;
  // All scores equal (or one): any positive scale keeps them centred at 0.
  y_scale_ = variance > 0 ? std::sqrt(variance) : (y_mean_ != 0 ? std::abs(y_mean_) : 1);

  // K + noise·I is positive definite for noise > 0, so the factorisation
  // cannot meet a non-positive pivot but through rounding; a small floor
  // keeps it finite then.
  factor_.assign(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      double sum = Kernel(x_[i], x_[j]) + (i == j ? options_.noise : 0.0);
      for (size_t k = 0; k < j; ++k) sum -= factor_[i * n + k] * factor_[j * n + k];
      if (i == j) {
        factor_[i * n + i] = std::sqrt(std::max(sum, 1e-12));
      } else {
        factor_[i * n + j] = sum / factor_[j * n + j];
      }
    }
  }
  alpha_.resize(n);
  for (size_t i = 0; i < n; ++i) alpha_[i] = (y[i] - y_mean_) / y_scale_;
  ForwardSubstitute(factor_, alpha_);
  BackSubstitute(factor_, alpha_);
}

GaussianProcess::Prediction GaussianProcess::Predict(const std::vector<double>& point) const {
  const size_t n = x_.size();
  if (n == 0) return {.mean = 0, .stddev = 1};
  std::vector<double> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = Kernel(point, x_[i]);
  double mean = 0;
  for (size_t i = 0; i < n; ++i) mean += k[i] * alpha_[i];
  // Variance: k(x, x) - vᵀv with L·v = k.
  ForwardSubstitute(factor_, k);
  double explained = 0;
  for (const double v : k) explained += v * v;
  const double variance = std::max(1.0 - explained, 0.0);
  return {.mean = y_mean_ + y_scale_ * mean, .stddev = y_scale_ * std::sqrt(variance)};
}

}  // namespace collective::daemon::tune
