#include "daemon/tune/bayesian_optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace collective::daemon::tune {
namespace {

constexpr double kPi = 3.14159265358979323846;

double NormalPdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * kPi); }
double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

}  // namespace

BayesianOptimizer::BayesianOptimizer(Options options)
    : options_(options),
      random_(options.seed),
      model_(options.model),
      best_point_(static_cast<size_t>(options.dimensions), 0.0) {}

void BayesianOptimizer::Observe(std::vector<double> point, double score) {
  if (scores_.empty() || score > best_score_) {
    best_score_ = score;
    best_point_ = point;
  }
  points_.push_back(std::move(point));
  scores_.push_back(score);
  model_.Fit(points_, scores_);
}

std::vector<double> BayesianOptimizer::RandomPoint() {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> point(static_cast<size_t>(options_.dimensions));
  for (double& coordinate : point) coordinate = unit(random_);
  return point;
}

double BayesianOptimizer::ExpectedImprovement(const std::vector<double>& point) const {
  const GaussianProcess::Prediction prediction = model_.Predict(point);
  if (prediction.stddev <= 0) return 0;
  // The margin is in units of the scores' spread, like the model's.
  const double margin = options_.exploration * model_.scale();
  const double gain = prediction.mean - incumbent_ - margin;
  const double z = gain / prediction.stddev;
  return gain * NormalCdf(z) + prediction.stddev * NormalPdf(z);
}

std::vector<double> BayesianOptimizer::Propose() {
  if (scores_.size() < 2) return RandomPoint();
  // Improvement over the best the model believes was measured, not over
  // the best noisy score: otherwise one lucky measurement draws every
  // later proposal back to itself.
  incumbent_ = model_.Predict(points_.front()).mean;
  for (const std::vector<double>& point : points_) {
    incumbent_ = std::max(incumbent_, model_.Predict(point).mean);
  }
  // Global candidates, then a local search around the best few of them
  // and around the best observed point: the acquisition is smooth, so
  // shrinking perturbations find its peak cheaply in a few dimensions.
  std::vector<std::pair<double, std::vector<double>>> scored;
  scored.reserve(static_cast<size_t>(options_.candidates) + 1);
  for (int i = 0; i < options_.candidates; ++i) {
    std::vector<double> point = RandomPoint();
    scored.emplace_back(ExpectedImprovement(point), std::move(point));
  }
  scored.emplace_back(ExpectedImprovement(best_point_), best_point_);
  std::partial_sort(scored.begin(), scored.begin() + std::min<size_t>(5, scored.size()),
                    scored.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::normal_distribution<double> step(0.0, 1.0);
  std::pair<double, std::vector<double>> best = scored.front();
  for (size_t start = 0; start < std::min<size_t>(5, scored.size()); ++start) {
    std::pair<double, std::vector<double>> current = scored[start];
    for (double radius = 0.1; radius > 1e-3; radius *= 0.7) {
      for (int tries = 0; tries < 8; ++tries) {
        std::vector<double> point = current.second;
        for (double& coordinate : point) {
          coordinate = std::clamp(coordinate + radius * step(random_), 0.0, 1.0);
        }
        const double improvement = ExpectedImprovement(point);
        if (improvement > current.first) current = {improvement, std::move(point)};
      }
    }
    if (current.first > best.first) best = std::move(current);
  }
  return best.second;
}

}  // namespace collective::daemon::tune
