#include "tests/bench/launcher.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "examples/workload.h"
#include "shm/segment_layout.h"
#include "tests/bench/child_watch.h"
#include "tests/bench/daemon_launcher.h"
#include "tests/bench/device_memory.h"
#include "tests/bench/interrupts.h"
#include "tests/bench/memcpy_bandwidth.h"
#include "tests/bench/mpirun_command.h"
#include "tests/bench/report.h"
#include "tests/bench/samples.h"
#include "tests/bench/wakeup_floor.h"
#include "tests/common/subprocess.h"

namespace collective::bench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// Large enough to leave every cache far behind.
constexpr uint64_t kMemcpyBytes = 256 * kMiB;
// The daemon's own default; a larger sweep needs room for its biggest result.
constexpr uint64_t kDefaultResultArena = 512 * kMiB;
constexpr absl::Duration kDaemonStartTimeout = absl::Seconds(30);
// A daemon someone else started either serves already or is not there.
constexpr absl::Duration kRunningDaemonTimeout = absl::Seconds(5);
constexpr absl::Duration kStopGrace = absl::Seconds(5);

uint64_t RoundUp(uint64_t value, uint64_t unit) { return (value + unit - 1) / unit * unit; }

// "resnet50_gradients.txt" is the "resnet50" workload.
std::string WorkloadName(const std::string& path) {
  const std::string stem = std::filesystem::path(path).stem().string();
  return std::string(absl::StripSuffix(stem, "_gradients"));
}

class Launcher {
 public:
  explicit Launcher(const BenchOptions& options)
      : options_(options), self_(std::filesystem::read_symlink("/proc/self/exe").string()) {}

  absl::Status Run() {
    RunInfo info{.nodes = options_.nodes,
                 .clients_per_node = options_.clients,
                 .collective = options_.collective,
                 .reduce_op = options_.reduce_op,
                 .compare_mpi = options_.compare_mpi};
    if (!options_.workload.empty()) {
      ASSIGN_OR_RETURN(workload_, examples::LoadWorkload(options_.workload));
      info.workload_name = WorkloadName(options_.workload);
      info.workload_tensors = workload_.size();
      for (const auto& tensor : workload_) {
        workload_bytes_ += static_cast<uint64_t>(tensor.elements) * sizeof(float);
      }
      info.workload_bytes = workload_bytes_;
    }
    // Before anything else runs, on a quiet machine.
    info.memcpy =
        MeasureMemcpy(kMemcpyBytes, static_cast<int>(std::thread::hardware_concurrency()));
    if (OnGpu()) {
      ASSIGN_OR_RETURN(info.device_copy_bytes_per_second, MeasureDeviceCopy(kMemcpyBytes));
    }
    if (options_.nodes == 1 && std::find(options_.modes.begin(), options_.modes.end(),
                                         BenchMode::kLatency) != options_.modes.end()) {
      WakeupFloor floor;
      ASSIGN_OR_RETURN(
          floor.last_wakes,
          MeasureWakeupFloor(options_.clients, options_.latency_iterations, Arrival::kLastWakes));
      ASSIGN_OR_RETURN(
          floor.each_wakes,
          MeasureWakeupFloor(options_.clients, options_.latency_iterations, Arrival::kEachWakes));
      info.wakeup_floor = floor;
    }
    report_ = std::make_unique<Report>(info, options_.json, stdout);

    if (options_.configs.empty()) {
      RETURN_IF_ERROR(StartDaemons({}, /*header=*/true));
      for (const BenchMode mode : options_.modes) {
        RETURN_IF_ERROR(RunMode(mode, /*with_mpi=*/options_.compare_mpi, {}));
        report_->PrintMode(mode);
      }
      return absl::OkStatus();
    }
    // One configuration after the other, each on daemons of its own; MPI
    // once.
    for (size_t c = 0; c < options_.configs.size(); ++c) {
      const std::string& config = options_.configs[c];
      RETURN_IF_ERROR(StartDaemons(ConfigFlags(config), /*header=*/c == 0));
      for (const BenchMode mode : options_.modes) {
        RETURN_IF_ERROR(RunMode(mode, options_.compare_mpi && c == 0, config));
      }
      RETURN_IF_ERROR(daemon_->Stop());
      daemon_.reset();
    }
    for (const BenchMode mode : options_.modes) report_->PrintMode(mode);
    return absl::OkStatus();
  }

  // Stops the daemons it started: SIGTERM, and they must exit 0.
  absl::Status StopDaemon() { return daemon_ ? daemon_->Stop() : absl::OkStatus(); }

 private:
  absl::Status StartDaemons(const std::vector<std::string>& extra, bool header) {
    const std::string binary = testing::ExecutableDirectory() + "/collectived";
    std::vector<std::string> flags = DaemonFlags();
    flags.insert(flags.end(), extra.begin(), extra.end());
    std::string where;
    if (options_.nodes > 1) {
      ASSIGN_OR_RETURN(daemon_, DaemonLauncher::StartWorld(MpirunCommand(options_, options_.nodes),
                                                           options_.nodes, binary, flags,
                                                           kDaemonStartTimeout, interrupts_));
      where =
          absl::StrCat("a collectived per node, started by mpirun (btl ", options_.btl, "), on ",
                       daemon_->socket(0), " to ", daemon_->socket(options_.nodes - 1));
    } else if (options_.socket.empty()) {
      ASSIGN_OR_RETURN(
          daemon_, DaemonLauncher::StartPrivate(binary, flags, kDaemonStartTimeout, interrupts_));
      where = absl::StrCat("private collectived on ", daemon_->socket(0));
    } else {
      ASSIGN_OR_RETURN(daemon_, DaemonLauncher::UseRunning(options_.socket, kRunningDaemonTimeout));
      where = absl::StrCat("collectived on ", options_.socket);
    }
    if (!options_.configs.empty()) {
      where = absl::StrCat(options_.configs.size(), " configurations in turn, each a ", where);
    }
    if (header) report_->PrintHeader(where);
    return absl::OkStatus();
  }

  // The daemon flags of a configuration of --configs; the autotune one also
  // makes the client workers run its trials' steps untimed first.
  std::vector<std::string> ConfigFlags(const std::string& config) {
    untimed_steps_ = 0;
    tune_log_.clear();
    if (absl::StartsWith(config, "fusion=")) {
      return {absl::StrCat("--fusion-threshold-bytes=", absl::StripPrefix(config, "fusion="))};
    }
    if (config != "autotune") return {};
    // One warm-up sample, the trials, and the step that ends the last one.
    untimed_steps_ = (1 + options_.autotune_trials) * options_.autotune_steps_per_sample + 2;
    tune_log_ = absl::StrCat(std::filesystem::temp_directory_path().string(),
                             "/collective-bench-autotune-", ::getpid(), ".csv");
    return {"--autotune=true", "--autotune-warmup-samples=1",
            absl::StrCat("--autotune-steps-per-sample=", options_.autotune_steps_per_sample),
            absl::StrCat("--autotune-bayes-opt-max-samples=", options_.autotune_trials),
            absl::StrCat("--autotune-log-file=", tune_log_)};
  }

  // One mode: MPI (if asked), then every placement on the daemons running.
  absl::Status RunMode(BenchMode mode, bool with_mpi, const std::string& config) {
    if (with_mpi) {
      Progress(mode, "mpi");
      ASSIGN_OR_RETURN(const SeriesMap series, RunMpi(mode));
      RETURN_IF_ERROR(Record(kMpi, mode, std::nullopt, series, {}));
    }
    for (const Placement placement : options_.placements) {
      Progress(mode, absl::StrCat("collectived ", PlacementName(placement),
                                  config.empty() ? "" : absl::StrCat(" [", config, "]")));
      ASSIGN_OR_RETURN(const SeriesMap series, RunClients(mode, placement));
      RETURN_IF_ERROR(Record(kCollectived, mode, placement, series, config));
      if (!tune_log_.empty()) ReportTuned(mode, placement);
    }
    return absl::OkStatus();
  }

  // What the autotuner of the job just measured kept: the last line of its
  // log (it rewrites the file for every job).
  void ReportTuned(BenchMode mode, Placement placement) const {
    std::FILE* log = std::fopen(tune_log_.c_str(), "r");
    std::string last;
    if (log != nullptr) {
      char line[512];
      while (std::fgets(line, sizeof line, log) != nullptr) last = line;
      std::fclose(log);
      std::remove(tune_log_.c_str());
    }
    std::fprintf(stderr, "collective-bench: %s %s autotune: %s", ModeName(mode),
                 PlacementName(placement),
                 absl::StartsWith(last, "best,")
                     ? absl::StrCat("kept (trial,fusion_threshold_bytes,cycle_time_ms,"
                                    "cross_node_chunk_bytes,bytes/s) ",
                                    last)
                           .c_str()
                     : "did not finish its trials within the untimed steps\n");
  }

  std::vector<std::string> DaemonFlags() const {
    std::vector<std::string> flags;
    const bool result_arena_set =
        std::any_of(options_.daemon_args.begin(), options_.daemon_args.end(), [](const auto& arg) {
          return absl::StrContains(arg, "result-arena") || absl::StrContains(arg, "result_arena");
        });
    const bool sweeping = std::find(options_.modes.begin(), options_.modes.end(),
                                    BenchMode::kSweep) != options_.modes.end();
    // Room for two of the largest results (allgather's holds every rank's
    // input).
    const uint64_t result_bytes =
        2 * AlgorithmBytes(options_.collective, SweepSizes(options_).back(), options_.ranks());
    if (sweeping && !result_arena_set && result_bytes > kDefaultResultArena) {
      flags.push_back(absl::StrCat("--result-arena-bytes=", RoundUp(result_bytes, kMiB)));
    }
    flags.insert(flags.end(), options_.daemon_args.begin(), options_.daemon_args.end());
    return flags;
  }

  bool OnGpu() const {
    return std::find(options_.placements.begin(), options_.placements.end(), Placement::kCuda) !=
           options_.placements.end();
  }

  // Each client's arena holds what one phase places or stages at once, plus
  // the barrier's slack (only that with CUDA tensors).
  uint64_t ArenaBytes(BenchMode mode) const {
    uint64_t bytes = kMiB;
    if (OnGpu()) return bytes;
    if (mode == BenchMode::kSweep) bytes += SweepSizes(options_).back();
    if (mode == BenchMode::kResnet) {
      for (const auto& tensor : workload_) {
        bytes +=
            RoundUp(static_cast<uint64_t>(tensor.elements) * sizeof(float), shm::kDataAlignment);
      }
    }
    return RoundUp(bytes, kMiB);
  }

  void Progress(BenchMode mode, const std::string& system) const {
    if (options_.json) return;
    std::fprintf(stderr, "collective-bench: running %s on %s\n", ModeName(mode), system.c_str());
  }

  absl::Time Deadline() const { return absl::Now() + absl::Seconds(options_.timeout_seconds); }

  absl::StatusOr<SeriesMap> RunClients(BenchMode mode, Placement placement) {
    // A job of its own per phase: a phase's clients never meet another's.
    const std::string job = absl::StrCat("collective-bench-", ::getpid(), "-", ++phase_);
    std::vector<testing::Subprocess> workers;
    std::vector<WatchedChild> watched;
    workers.reserve(static_cast<size_t>(options_.ranks()));
    // Global ranks follow node order: node offset + local rank.
    BenchOptions worker_options = options_;
    worker_options.untimed_steps = untimed_steps_;
    for (int rank = 0; rank < options_.ranks(); ++rank) {
      std::vector<std::string> argv = {self_};
      const auto args = WorkerArguments(worker_options, Role::kClient, mode, placement);
      argv.insert(argv.end(), args.begin(), args.end());
      argv.insert(argv.end(), {"--rank", std::to_string(rank)});
      const std::string local_rank = std::to_string(rank % options_.clients);
      const std::string local_size = std::to_string(options_.clients);
      auto worker =
          interrupts_.Start(argv, {{"COLLECTIVE_SOCKET", daemon_->socket(rank / options_.clients)},
                                   {"COLLECTIVE_JOB_ID", job},
                                   {"COLLECTIVE_ARENA_BYTES", std::to_string(ArenaBytes(mode))},
                                   {"LOCAL_RANK", local_rank},
                                   {"LOCAL_SIZE", local_size},
                                   // These win over LOCAL_* in the client; a stale one in the
                                   // environment must not.
                                   {"COLLECTIVE_LOCAL_RANK", local_rank},
                                   {"COLLECTIVE_LOCAL_SIZE", local_size}});
      if (!worker.ok()) return Annotate(worker.status(), "cannot start a client worker");
      workers.push_back(std::move(*worker));
    }
    for (int rank = 0; rank < options_.ranks(); ++rank) {
      const std::string node =
          options_.nodes > 1 ? absl::StrCat(" (node ", rank / options_.clients, ")") : "";
      watched.push_back(
          {absl::StrCat("client worker ", rank, node), &workers[static_cast<size_t>(rank)]});
    }
    const std::string phase =
        absl::StrCat(ModeName(mode), " on collectived (", PlacementName(placement), ")");
    if (absl::Status done = AwaitChildren(watched, daemon_->pids(), Deadline(), interrupts_);
        !done.ok()) {
      StopChildren(watched, kStopGrace);
      // A daemon that died explains the failure; one that an interrupt
      // stopped does not.
      const std::string daemon_exit = absl::IsCancelled(done) ? "" : daemon_->ExitDescription();
      return Annotate(done, absl::StrCat(phase, daemon_exit.empty() ? "" : "; " + daemon_exit));
    }
    std::vector<SeriesMap> ranks;
    for (auto& worker : workers) {
      ASSIGN_OR_RETURN_WITH(SeriesMap series, ParseSeries(worker.Stdout()), phase);
      ranks.push_back(std::move(series));
    }
    ASSIGN_OR_RETURN_WITH(SeriesMap slowest, SlowestRank(ranks), phase);
    return slowest;
  }

  absl::StatusOr<SeriesMap> RunMpi(BenchMode mode) {
    std::vector<std::string> argv = MpirunCommand(options_, options_.ranks());
    argv.push_back(self_);
    const auto args = WorkerArguments(options_, Role::kMpi, mode, Placement::kCopy);
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string phase = absl::StrCat(ModeName(mode), " on MPI");
    ASSIGN_OR_RETURN_WITH(testing::Subprocess mpirun, interrupts_.Start(argv),
                          absl::StrCat(phase, ": cannot start ", options_.mpirun));
    const std::vector<WatchedChild> watched = {{"mpirun", &mpirun}};
    if (absl::Status done = AwaitChildren(watched, {}, Deadline(), interrupts_); !done.ok()) {
      StopChildren(watched, kStopGrace);
      return Annotate(done, phase);
    }
    return ParseSeries(mpirun.Stdout());
  }

  absl::Status Record(const char* system, BenchMode mode, std::optional<Placement> placement,
                      const SeriesMap& series, const std::string& config) {
    auto add = [&](const std::string& key, uint64_t bytes) -> absl::Status {
      auto found = series.find(key);
      if (found == series.end() || found->second.nanos.empty()) {
        return absl::DataLossError(absl::StrCat(ModeName(mode), " on ", system,
                                                ": no measurements of '", key, "' came back"));
      }
      // Times no check stands behind are not reported.
      if (found->second.verified_ranks != options_.ranks()) {
        return absl::DataLossError(
            absl::StrCat(ModeName(mode), " on ", system, ": ", found->second.verified_ranks, " of ",
                         options_.ranks(), " ranks checked their results of '", key, "'"));
      }
      report_->Add({.system = system,
                    .mode = mode,
                    .placement = placement,
                    .config = config,
                    .bytes = bytes,
                    .verified_ranks = found->second.verified_ranks,
                    .time = Summarize(found->second.nanos)});
      return absl::OkStatus();
    };
    switch (mode) {
      case BenchMode::kSweep:
        for (const uint64_t bytes : SweepSizes(options_)) {
          RETURN_IF_ERROR(add(SweepKey(bytes), bytes));
        }
        return absl::OkStatus();
      case BenchMode::kResnet:
        return add(kResnetKey, workload_bytes_);
      case BenchMode::kLatency:
        return add(kLatencyKey, sizeof(float));
    }
    return absl::OkStatus();
  }

  // Declared first, so that it goes last: no child may start with the
  // signals blocked, and no signal may end the launcher before it has
  // stopped its children.
  Interrupts interrupts_;
  const BenchOptions& options_;
  const std::string self_;
  std::vector<examples::WorkloadTensor> workload_;
  uint64_t workload_bytes_ = 0;
  std::unique_ptr<DaemonLauncher> daemon_;
  std::unique_ptr<Report> report_;
  int phase_ = 0;
  // The configuration running (--configs autotune): untimed steps per
  // client, and the autotuner's log.
  int untimed_steps_ = 0;
  std::string tune_log_;
};

}  // namespace

int RunLauncher(const BenchOptions& options) {
  Launcher launcher(options);
  const absl::Status status = launcher.Run();
  // Stopped in any case, so that it removes its socket and segments.
  const absl::Status stopped = launcher.StopDaemon();
  for (const absl::Status& error : {status, stopped}) {
    if (!error.ok()) {
      std::fprintf(stderr, "collective-bench: error: %s\n", std::string(error.message()).c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace collective::bench
