// daemon/tune: the Gaussian process interpolates what it saw, and the
// Bayesian optimizer finds the maximum of known functions within a budget
// of samples, reproducibly for a seed.
#include "daemon/tune/bayesian_optimizer.h"

#include <cmath>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/tune/gaussian_process.h"

namespace collective::daemon::tune {
namespace {

TEST(GaussianProcessTest, PredictsObservedScoresAndIsUnsureFarFromThem) {
  GaussianProcess model({.length_scale = 0.2, .noise = 1e-6});
  model.Fit({{0.1}, {0.5}, {0.9}}, {3.0, 7.0, 5.0});
  EXPECT_NEAR(model.Predict({0.1}).mean, 3.0, 1e-3);
  EXPECT_NEAR(model.Predict({0.5}).mean, 7.0, 1e-3);
  EXPECT_NEAR(model.Predict({0.9}).mean, 5.0, 1e-3);
  EXPECT_LT(model.Predict({0.5}).stddev, 1e-2);
  // Between samples the model is less sure than at them.
  EXPECT_GT(model.Predict({0.3}).stddev, model.Predict({0.5}).stddev);
}

// Runs `samples` proposals on `f` and returns the best score seen.
double Optimize(const std::function<double(const std::vector<double>&)>& f, int dimensions,
                int samples, uint64_t seed, std::vector<double>* best_point = nullptr) {
  BayesianOptimizer optimizer({.dimensions = dimensions, .seed = seed});
  for (int i = 0; i < samples; ++i) {
    std::vector<double> point = optimizer.Propose();
    for (const double coordinate : point) {
      EXPECT_GE(coordinate, 0.0);
      EXPECT_LE(coordinate, 1.0);
    }
    const double score = f(point);
    optimizer.Observe(point, score);
  }
  if (best_point != nullptr) *best_point = optimizer.best_point();
  return optimizer.best_score();
}

TEST(BayesianOptimizerTest, FindsTheMaximumOfAOneDimensionalFunction) {
  // A peak at 0.3 and a lower one at 0.8: throughput against a fusion
  // threshold looks like this.
  auto f = [](const std::vector<double>& x) {
    return 10 * std::exp(-std::pow((x[0] - 0.3) / 0.1, 2)) +
           6 * std::exp(-std::pow((x[0] - 0.8) / 0.1, 2));
  };
  std::vector<double> best;
  const double score = Optimize(f, 1, 15, 7, &best);
  EXPECT_GT(score, 9.8);
  EXPECT_NEAR(best[0], 0.3, 0.05);
}

TEST(BayesianOptimizerTest, FindsTheMaximumOfAThreeDimensionalFunction) {
  auto f = [](const std::vector<double>& x) {
    return 1.0 - std::pow(x[0] - 0.7, 2) - std::pow(x[1] - 0.2, 2) - std::pow(x[2] - 0.5, 2);
  };
  std::vector<double> best;
  const double score = Optimize(f, 3, 25, 3, &best);
  EXPECT_GT(score, 0.98);
  EXPECT_NEAR(best[0], 0.7, 0.15);
  EXPECT_NEAR(best[1], 0.2, 0.15);
  EXPECT_NEAR(best[2], 0.5, 0.15);
}

TEST(BayesianOptimizerTest, BeatsRandomSearchOnTheSameBudget) {
  auto f = [](const std::vector<double>& x) {
    return -std::pow(x[0] - 0.62, 2) - std::pow(x[1] - 0.35, 2);
  };
  double guided = 0;
  double random = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    guided += Optimize(f, 2, 15, seed);
    // The first two proposals are random, so a budget of two is random search's
    // first two; draw 15 random points with the same generator instead.
    BayesianOptimizer draws({.dimensions = 2, .seed = seed});
    double best = -1e9;
    for (int i = 0; i < 15; ++i) best = std::max(best, f(draws.Propose()));
    random += best;
  }
  EXPECT_GT(guided, random);
}

TEST(BayesianOptimizerTest, IsReproducibleForASeed) {
  auto f = [](const std::vector<double>& x) { return std::sin(6 * x[0]) + x[1]; };
  std::vector<double> first;
  std::vector<double> second;
  EXPECT_EQ(Optimize(f, 2, 10, 42, &first), Optimize(f, 2, 10, 42, &second));
  EXPECT_EQ(first, second);
}

}  // namespace
}  // namespace collective::daemon::tune
