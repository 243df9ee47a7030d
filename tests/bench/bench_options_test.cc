// The launcher's worker arguments, read back by a worker's own parser, give
// the worker the role, mode and placement the launcher meant (a CUDA worker
// once got "--placement cuda", which its parser refuses).
#include "tests/bench/bench_options.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "CLI/CLI.hpp"

namespace collective::bench {
namespace {

// What a worker started with `args` would run with.
BenchOptions ParseWorker(std::vector<std::string> args) {
  CLI::App app;
  BenchOptions options;
  OptionParser parser(app, options);
  std::vector<const char*> argv = {"collective-bench"};
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  EXPECT_NO_THROW(app.parse(static_cast<int>(argv.size()), argv.data()));
  const absl::Status finished = parser.FinishOptions();
  EXPECT_TRUE(finished.ok()) << finished;
  return options;
}

BenchOptions Launcher() {
  BenchOptions options;
  options.clients = 3;
  options.workload = "/nonexistent/resnet50_gradients.txt";  // passed on, not read
  return options;
}

TEST(WorkerArgumentsTest, EveryClientPlacementReachesTheWorker) {
  for (Placement placement :
       {Placement::kCopy, Placement::kZeroCopy, Placement::kInPlace, Placement::kCuda}) {
    SCOPED_TRACE(PlacementName(placement));
    const BenchOptions worker =
        ParseWorker(WorkerArguments(Launcher(), Role::kClient, BenchMode::kLatency, placement));
    EXPECT_EQ(worker.role, Role::kClient);
    EXPECT_EQ(worker.clients, 3);
    ASSERT_EQ(worker.placements.size(), 1u);
    EXPECT_EQ(worker.placements[0], placement);
    ASSERT_EQ(worker.modes.size(), 1u);
    EXPECT_EQ(worker.modes[0], BenchMode::kLatency);
  }
}

TEST(WorkerArgumentsTest, MpiWorkersTakeNoPlacement) {
  const std::vector<std::string> args =
      WorkerArguments(Launcher(), Role::kMpi, BenchMode::kSweep, Placement::kCopy);
  for (const std::string& arg : args) {
    EXPECT_NE(arg, "--placement");
    EXPECT_NE(arg, "--device");
  }
  EXPECT_EQ(ParseWorker(args).role, Role::kMpi);
}

// --configs autotune: the steps its trials take reach the ResNet workers,
// which run them untimed before the timed ones.
TEST(WorkerArgumentsTest, TheAutotunersUntimedStepsReachTheResnetWorker) {
  BenchOptions launcher = Launcher();
  launcher.untimed_steps = 28;
  const BenchOptions worker = ParseWorker(
      WorkerArguments(launcher, Role::kClient, BenchMode::kResnet, Placement::kZeroCopy));
  EXPECT_EQ(worker.untimed_steps, 28);
}

TEST(ConfigsOptionTest, NamesDefaultsAutotuneAndFusionThresholds) {
  const BenchOptions options =
      ParseWorker({"--mode", "latency", "--configs", "defaults,autotune,fusion=4MiB"});
  EXPECT_EQ(options.configs, (std::vector<std::string>{"defaults", "autotune", "fusion=4MiB"}));
  CLI::App app;
  BenchOptions refused;
  OptionParser parser(app, refused);
  const std::vector<const char*> argv = {"collective-bench", "--configs", "fast"};
  EXPECT_THROW(app.parse(static_cast<int>(argv.size()), argv.data()), CLI::ValidationError);
}

}  // namespace
}  // namespace collective::bench
