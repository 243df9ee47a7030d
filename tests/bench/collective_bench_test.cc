// collective-bench end to end: a short run of every mode against MPI, on one
// node and on two stand-in nodes (daemons under mpirun, over TCP), and of
// every collective's sweep, prints JSON lines with the fields scripts rely on
// (and bandwidths by the nccl-tests conventions), each for results that every
// rank checked; options that contradict each other are refused; a daemon
// that does not come up, a worker that fails, a phase past its deadline, or
// SIGTERM ends the run with a clear message, exit 1, and no process, socket
// or shared-memory segment left behind.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/common/subprocess.h"
#include "tests/common/temporary_directory.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

using google::protobuf::Struct;

struct BenchRun {
  std::optional<int> status;
  std::string out;
  std::string err;
  pid_t pid = -1;
};

// Waits up to `timeout` for a started run to end.
BenchRun AwaitBench(Subprocess& process, absl::Duration timeout) {
  BenchRun run;
  run.pid = process.pid();
  run.status = process.Wait(timeout);
  run.out = process.Stdout();
  run.err = process.Stderr();
  return run;
}

BenchRun RunBench(const std::vector<std::string>& args, absl::Duration timeout) {
  std::vector<std::string> argv = {COLLECTIVE_BENCH_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  auto process = Subprocess::Start(argv);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return {};
  return AwaitBench(*process, timeout);
}

std::string Text(const Struct& line, const std::string& key) {
  auto it = line.fields().find(key);
  return it == line.fields().end() ? "" : it->second.string_value();
}

double Number(const Struct& line, const std::string& key) {
  auto it = line.fields().find(key);
  return it == line.fields().end() ? -1 : it->second.number_value();
}

bool Has(const Struct& line, const std::string& key) { return line.fields().contains(key); }

// Processes whose command line contains `needle` (as bytes, NULs included).
std::vector<std::string> ProcessesMentioning(const std::string& needle) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream file(entry.path() / "cmdline");
    std::stringstream text;
    text << file.rdbuf();
    if (absl::StrContains(text.str(), needle)) found.push_back(entry.path().filename().string());
  }
  return found;
}

// Workers name their launcher with --parent PID; none may outlive it.
void ExpectNoWorkersOf(pid_t launcher) {
  const std::string needle = absl::StrCat("--parent", std::string(1, '\0'), launcher);
  EXPECT_TRUE(ProcessesMentioning(needle).empty()) << "orphaned workers of " << launcher;
}

// What a short run of every mode against MPI must print.
struct EveryModeRun {
  int nodes = 1;
  int clients_per_node = 0;
  int sweep_sizes = 0;
  std::string workload;
  int tensors = 0;
};

// Every JSON line of `run` carries the fields scripts rely on, for results
// that every rank checked; every point is on MPI and in both placements.
void ExpectEveryModeAgainstMpi(const BenchRun& run, const EveryModeRun& expected) {
  ASSERT_TRUE(ExitedCleanly(run.status)) << run.err;
  const int ranks = expected.nodes * expected.clients_per_node;
  std::map<std::string, int> lines_per_mode;
  std::set<std::string> points;
  for (absl::string_view text : absl::StrSplit(run.out, '\n', absl::SkipEmpty())) {
    Struct line;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(text), &line).ok())
        << "not JSON: " << text;
    const std::string system = Text(line, "system");
    const std::string mode = Text(line, "mode");
    ASSERT_TRUE(system == "collectived" || system == "mpi") << text;
    EXPECT_EQ(Has(line, "placement"), system == "collectived") << text;
    EXPECT_EQ(Text(line, "op"), "allreduce") << text;
    EXPECT_EQ(Text(line, "reduce_op"), "sum") << text;
    EXPECT_EQ(Number(line, "clients"), ranks) << text;
    EXPECT_EQ(Number(line, "nodes"), expected.nodes) << text;
    EXPECT_EQ(Number(line, "clients_per_node"), expected.clients_per_node) << text;
    // Each rank (MPI's as well) checked its results of the point.
    EXPECT_EQ(Number(line, "verified_ranks"), ranks) << text;
    const double algbw = Number(line, "algbw_GBps");
    EXPECT_GT(algbw, 0) << text;
    EXPECT_NEAR(Number(line, "busbw_GBps"), algbw * 2 * (ranks - 1) / ranks, 1e-4 * algbw) << text;
    EXPECT_GT(Number(line, "bytes"), 0) << text;
    if (mode == "resnet") {
      EXPECT_EQ(Text(line, "workload"), expected.workload) << text;
      EXPECT_EQ(Number(line, "tensors"), expected.tensors) << text;
      EXPECT_GT(Number(line, "step_ms"), 0) << text;
    } else {
      ASSERT_TRUE(mode == "sweep" || mode == "latency") << text;
      EXPECT_GT(Number(line, "median_us"), 0) << text;
      EXPECT_GE(Number(line, "p99_us"), Number(line, "median_us")) << text;
    }
    if (system == "collectived") {
      EXPECT_GT(Number(line, "ratio_vs_mpi"), 0) << text;
      EXPECT_GT(Number(line, "speedup_vs_mpi"), 0) << text;
    }
    if (mode == "resnet" && Text(line, "placement") == "zerocopy") {
      // The memory-traffic floor bounds one node only.
      EXPECT_EQ(Has(line, "floor_ms"), expected.nodes == 1) << text;
      if (expected.nodes == 1) {
        EXPECT_GT(Number(line, "floor_ms"), 0) << text;
        EXPECT_GT(Number(line, "vs_floor"), 0) << text;
        EXPECT_GT(Number(line, "memcpy_GBps"), 0) << text;
      }
    }
    if (mode == "latency") {
      // The wake-up floor bounds one node only, and no step can beat it.
      EXPECT_EQ(Has(line, "wakeup_floor_p50_us"), expected.nodes == 1) << text;
      if (expected.nodes == 1) {
        EXPECT_GT(Number(line, "wakeup_floor_p50_us"), 0) << text;
      }
    }
    ++lines_per_mode[mode];
    points.insert(
        absl::StrCat(system, "/", Text(line, "placement"), "/", mode, "/", Number(line, "bytes")));
  }
  EXPECT_EQ(lines_per_mode["sweep"], 3 * expected.sweep_sizes);
  EXPECT_EQ(lines_per_mode["resnet"], 3);
  EXPECT_EQ(lines_per_mode["latency"], 3);
  EXPECT_EQ(points.size(), 3u * (static_cast<size_t>(expected.sweep_sizes) + 2));
  ExpectNoWorkersOf(run.pid);
}

TEST(CollectiveBenchTest, ShortRunPrintsJsonLinesWithTheRequiredFields) {
  const BenchRun run =
      RunBench({"--clients", "2", "--mode", "all", "--sizes", "8:65536", "--iterations", "5",
                "--latency-iterations", "50", "--steps", "3", "--compare", "mpi", "--json"},
               absl::Seconds(100));
  // 8 to 65536 bytes is 14 sizes.
  ExpectEveryModeAgainstMpi(run, {.nodes = 1,
                                  .clients_per_node = 2,
                                  .sweep_sizes = 14,
                                  .workload = "resnet50",
                                  .tensors = 161});
}

// A workload of three gradients, so that two stand-in nodes on two cores
// finish a step in milliseconds rather than the ResNet's hundreds.
constexpr char kSmallWorkload[] =
    "fc.weight 262144 512x512\n"
    "fc.bias 512 512\n"
    "conv.weight 1728 64x3x3x3\n";

// Two daemons under mpirun over TCP, each with two clients: one job of four
// ranks, global rank = node offset + local rank (a worker that gets another
// rank or size fails the run).
TEST(CollectiveBenchTest, TwoNodesOverTcpReportEveryRanksCheckedResults) {
  TemporaryDirectory directory("bench");
  ASSERT_FALSE(directory.path().empty());
  const std::string workload = directory.path() + "/small_gradients.txt";
  std::ofstream(workload) << kSmallWorkload;
  const BenchRun run =
      RunBench({"--nodes", "2", "--clients-per-node", "2", "--mode", "all", "--sizes",
                "1024:262144", "--iterations", "5", "--latency-iterations", "20", "--steps", "3",
                "--workload", workload, "--compare", "mpi", "--json"},
               absl::Seconds(100));
  // 1024 to 262144 bytes is 9 sizes.
  ExpectEveryModeAgainstMpi(
      run,
      {.nodes = 2, .clients_per_node = 2, .sweep_sizes = 9, .workload = "small", .tensors = 3});
}

struct CollectiveCase {
  std::vector<std::string> args;
  std::string op;
  std::string reduce_op;  // empty: the line has none
  // busbw / algbw, and algbw's bytes / the input's, for 3 ranks.
  double bus_factor;
  int output_ranks;
  // Sizes rounded up to a multiple of 4*K bytes.
  bool splits;
};

// What ctest lists for a case: its command line, not its bytes.
void PrintTo(const CollectiveCase& c, std::ostream* os) { *os << absl::StrJoin(c.args, " "); }

class CollectiveSweepTest : public ::testing::TestWithParam<CollectiveCase> {};

// Three ranks, so that alltoall and reducescatter round the sizes; --mode all
// (the default) runs only the sweep of a collective other than allreduce.
TEST_P(CollectiveSweepTest, ShortSweepAgainstMpiPrintsTheCollectivesFields) {
  const CollectiveCase& c = GetParam();
  std::vector<std::string> args = {"--clients", "3",   "--sizes", "1024:65536", "--iterations", "5",
                                   "--compare", "mpi", "--json"};
  args.insert(args.end(), c.args.begin(), c.args.end());
  const BenchRun run = RunBench(args, absl::Seconds(100));
  ASSERT_TRUE(ExitedCleanly(run.status)) << run.err;
  std::map<std::string, std::set<double>> sizes_per_system;
  for (absl::string_view text : absl::StrSplit(run.out, '\n', absl::SkipEmpty())) {
    Struct line;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(text), &line).ok())
        << "not JSON: " << text;
    const std::string system = Text(line, "system");
    EXPECT_EQ(Text(line, "mode"), "sweep") << text;
    EXPECT_EQ(Text(line, "op"), c.op) << text;
    EXPECT_EQ(Has(line, "reduce_op"), !c.reduce_op.empty()) << text;
    EXPECT_EQ(Text(line, "reduce_op"), c.reduce_op) << text;
    const bool rooted =
        c.op == "broadcast" || c.op == "reduce" || c.op == "gather" || c.op == "scatter";
    EXPECT_EQ(Has(line, "root"), rooted) << text;
    EXPECT_EQ(Number(line, "clients"), 3) << text;
    const double bytes = Number(line, "bytes");
    EXPECT_GE(bytes, 1024) << text;
    EXPECT_EQ(std::fmod(bytes, c.splits ? 12 : 4), 0) << text;
    const double median_us = Number(line, "median_us");
    ASSERT_GT(median_us, 0) << text;
    EXPECT_GE(Number(line, "p99_us"), median_us) << text;
    const double algbw = Number(line, "algbw_GBps");
    EXPECT_NEAR(algbw, bytes * c.output_ranks / (median_us * 1e3), 1e-4 * algbw) << text;
    EXPECT_NEAR(Number(line, "busbw_GBps"), algbw * c.bus_factor, 1e-4 * algbw) << text;
    if (system == "collectived") {
      EXPECT_GT(Number(line, "mpi_median_us"), 0) << text;
      EXPECT_NEAR(Number(line, "ratio_vs_mpi"), median_us / Number(line, "mpi_median_us"), 1e-3)
          << text;
      EXPECT_GT(Number(line, "speedup_vs_mpi"), 0) << text;
      sizes_per_system[Text(line, "placement")].insert(bytes);
    } else {
      ASSERT_EQ(system, "mpi") << text;
      EXPECT_FALSE(Has(line, "ratio_vs_mpi")) << text;
      sizes_per_system[system].insert(bytes);
    }
  }
  // 1024 to 65536 bytes is 7 sizes, each on MPI and in both placements.
  ASSERT_EQ(sizes_per_system.size(), 3u) << run.out;
  for (const auto& [system, sizes] : sizes_per_system) {
    EXPECT_EQ(sizes.size(), 7u) << system;
    EXPECT_EQ(sizes, sizes_per_system["mpi"]) << system;
  }
  ExpectNoWorkersOf(run.pid);
}

INSTANTIATE_TEST_SUITE_P(
    EveryCollective, CollectiveSweepTest,
    ::testing::Values(
        // The old --op average: allreduce with --reduce-op average.
        CollectiveCase{
            {"--op", "average", "--mode", "sweep"}, "allreduce", "average", 4.0 / 3, 1, false},
        CollectiveCase{{"--op", "allgather"}, "allgather", "", 2.0 / 3, 3, false},
        CollectiveCase{{"--op", "broadcast"}, "broadcast", "", 1.0, 1, false},
        CollectiveCase{{"--op", "alltoall"}, "alltoall", "", 2.0 / 3, 1, true},
        CollectiveCase{{"--op", "reducescatter", "--reduce-op", "average"},
                       "reducescatter",
                       "average",
                       2.0 / 3,
                       1,
                       true},
        CollectiveCase{
            {"--op", "reduce", "--reduce-op", "average"}, "reduce", "average", 1.0, 1, false},
        CollectiveCase{{"--op", "gather"}, "gather", "", 2.0 / 3, 3, false},
        CollectiveCase{{"--op", "scatter"}, "scatter", "", 2.0 / 3, 1, true}),
    [](const ::testing::TestParamInfo<CollectiveCase>& param) { return param.param.args[1]; });

TEST(CollectiveBenchTest, ContradictoryOptionsAreRefused) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--op", "allgather", "--mode", "latency"}, "measures allreduce only"},
      {{"--op", "alltoall", "--mode", "resnet"}, "measures allreduce only"},
      {{"--op", "sum", "--reduce-op", "average"}, "contradicts --reduce-op"},
      {{"--op", "broadcast", "--reduce-op", "sum"}, "reduces nothing"},
      {{"--nodes", "2", "--socket", "/tmp/x.sock"}, "--nodes starts daemons of its own"},
  };
  for (const auto& [args, message] : cases) {
    const BenchRun run = RunBench(args, absl::Seconds(30));
    ASSERT_TRUE(run.status.has_value());
    EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 2)
        << absl::StrJoin(args, " ") << ": " << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, message)) << absl::StrJoin(args, " ") << ": " << run.err;
  }
}

TEST(CollectiveBenchTest, DeviceCudaTakesNoHostPlacement) {
  const BenchRun run = RunBench({"--device", "cuda", "--placement", "zerocopy"}, absl::Seconds(30));
  ASSERT_TRUE(run.status.has_value());
  EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "drop --placement")) << run.err;
}

TEST(CollectiveBenchTest, DeviceCudaIsNotComparedWithMpi) {
  const BenchRun run = RunBench({"--device", "cuda", "--compare", "mpi"}, absl::Seconds(30));
  ASSERT_TRUE(run.status.has_value());
  EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "device-to-device copy bandwidth")) << run.err;
}

// With a GPU: JSON lines of CUDA tensors, measured against the device copy.
// Without one (or in a build without CUDA): a clear failure, exit 1, and
// nothing left behind.
TEST(CollectiveBenchTest, DeviceCudaRunsOrSaysWhyNot) {
  const BenchRun run = RunBench({"--device", "cuda", "--clients", "2", "--mode", "sweep", "--sizes",
                                 "8:4096", "--iterations", "5", "--json"},
                                absl::Seconds(100));
  ASSERT_TRUE(run.status.has_value());
  if (!ExitedCleanly(run.status)) {
    // Only the device check before any phase may refuse: a failure of the
    // CUDA path itself, on a machine with a GPU, fails this test.
    EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 1) << run.err;
    EXPECT_TRUE(absl::StrContains(run.err,
                                  "--device cuda: this collective-bench was built without "
                                  "CUDA") ||
                absl::StrContains(run.err, "--device cuda: no CUDA device") ||
                absl::StrContains(run.err, "--device cuda: cudaGetDeviceCount: "))
        << run.err;
    ExpectNoWorkersOf(run.pid);
    return;
  }
  int lines = 0;
  for (absl::string_view text : absl::StrSplit(run.out, '\n', absl::SkipEmpty())) {
    Struct line;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(text), &line).ok());
    EXPECT_EQ(Text(line, "placement"), "cuda") << text;
    EXPECT_GT(Number(line, "algbw_vs_d2d"), 0) << text;
    EXPECT_GT(Number(line, "d2d_copy_GBps"), 0) << text;
    ++lines;
  }
  EXPECT_EQ(lines, 10);  // 8 to 4096 bytes
}

TEST(CollectiveBenchTest, DaemonThatDoesNotComeUpFailsTheRun) {
  const BenchRun run = RunBench(
      {"--clients", "2", "--mode", "latency", "--daemon-arg=--no-such-flag"}, absl::Seconds(60));
  ASSERT_TRUE(run.status.has_value());
  EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 1) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "collectived did not come up")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "--no-such-flag")) << run.err;
}

TEST(CollectiveBenchTest, FailedWorkerFailsTheRun) {
  // The daemon refuses the arena the sweep's largest size needs.
  const BenchRun run =
      RunBench({"--clients", "2", "--mode", "sweep", "--sizes", "8:4194304",
                "--daemon-arg=--max-arena-bytes=2MiB", "--daemon-arg=--default-arena-bytes=1MiB"},
               absl::Seconds(60));
  ASSERT_TRUE(run.status.has_value());
  EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 1) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "client worker")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "arena")) << run.err;
  ExpectNoWorkersOf(run.pid);
}

constexpr char kDaemonDirectory[] = "/tmp/collective-bench-";

// The header names the daemons' directory (mkdtemp's six characters follow
// the prefix); empty until it is printed.
std::string DaemonDirectory(const std::string& out) {
  const size_t at = out.find(kDaemonDirectory);
  if (at == std::string::npos || out.size() < at + sizeof(kDaemonDirectory) - 1 + 6) return "";
  return out.substr(at, sizeof(kDaemonDirectory) - 1 + 6);
}

// The daemons (any process naming their directory: mpirun too), their
// directory with the sockets, their segments and the workers must be gone
// with the run.
void ExpectNothingLeftBehind(const BenchRun& run, const std::vector<std::string>& sockets) {
  ExpectNoWorkersOf(run.pid);
  const std::string directory = DaemonDirectory(run.out);
  ASSERT_FALSE(directory.empty()) << run.out;
  EXPECT_TRUE(ProcessesMentioning(directory).empty())
      << "a daemon in " << directory << " outlived the run";
  EXPECT_FALSE(std::filesystem::exists(directory));
  for (const std::string& socket : sockets) {
    EXPECT_TRUE(SegmentsOf(directory + "/" + socket).empty()) << socket;
  }
}

// Waits, against a deadline, until the running benchmark has printed its
// daemons' directory and a client holds a segment of the daemon on
// `socket` there: the run is in the middle of its work.
void AwaitClientSegment(Subprocess& process, const std::string& socket) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::string directory;
  while (directory.empty() || SegmentsOf(directory + "/" + socket).empty()) {
    ASSERT_LT(absl::Now(), deadline) << process.Stdout() << process.Stderr();
    ASSERT_FALSE(process.Wait(absl::Milliseconds(20)).has_value()) << process.Stderr();
    directory = DaemonDirectory(process.Stdout());
  }
}

TEST(CollectiveBenchTest, PhasePastItsDeadlineStopsEveryProcess) {
  const BenchRun run =
      RunBench({"--clients", "2", "--mode", "sweep", "--placement", "copy", "--timeout", "2"},
               absl::Seconds(60));
  ASSERT_TRUE(run.status.has_value());
  EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 1) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "still running at the deadline")) << run.err;
  ExpectNothingLeftBehind(run, {"collectived.sock"});
}

TEST(CollectiveBenchTest, InterruptedRunStopsEveryProcess) {
  auto process = Subprocess::Start(
      {COLLECTIVE_BENCH_BINARY, "--clients", "2", "--mode", "sweep", "--placement", "copy"});
  ASSERT_TRUE(process.ok()) << process.status();
  ASSERT_NO_FATAL_FAILURE(AwaitClientSegment(*process, "collectived.sock"));
  process->Signal(SIGTERM);
  const BenchRun run = AwaitBench(*process, absl::Seconds(30));
  ASSERT_TRUE(run.status.has_value());
  EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 1) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "interrupted by SIGTERM")) << run.err;
  ExpectNothingLeftBehind(run, {"collectived.sock"});
}

// SIGTERM while the clients of two stand-in nodes hold segments: every
// daemon stops (by its own pid; mpirun then exits), and nothing stays.
TEST(CollectiveBenchTest, InterruptedTwoNodeRunStopsEveryDaemon) {
  auto process = Subprocess::Start({COLLECTIVE_BENCH_BINARY, "--nodes", "2", "--clients-per-node",
                                    "2", "--mode", "sweep", "--placement", "copy"});
  ASSERT_TRUE(process.ok()) << process.status();
  ASSERT_NO_FATAL_FAILURE(AwaitClientSegment(*process, "node1.sock"));
  process->Signal(SIGTERM);
  const BenchRun run = AwaitBench(*process, absl::Seconds(60));
  ASSERT_TRUE(run.status.has_value());
  EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 1) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "interrupted by SIGTERM")) << run.err;
  ExpectNothingLeftBehind(run, {"node0.sock", "node1.sock"});
}

TEST(CollectiveBenchTest, FailedWorkerOnTwoNodesFailsTheRunAndStopsEveryDaemon) {
  // The daemons refuse the arena the sweep's largest size needs.
  const BenchRun run =
      RunBench({"--nodes", "2", "--clients-per-node", "2", "--mode", "sweep", "--placement", "copy",
                "--sizes", "8:4194304", "--daemon-arg=--max-arena-bytes=2MiB",
                "--daemon-arg=--default-arena-bytes=1MiB"},
               absl::Seconds(60));
  ASSERT_TRUE(run.status.has_value());
  EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 1) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "client worker")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "arena")) << run.err;
  ExpectNothingLeftBehind(run, {"node0.sock", "node1.sock"});
}

}  // namespace
}  // namespace collective::testing
