#include "tests/bench/bench_options.h"

#include <algorithm>
#include <climits>
#include <filesystem>

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "tests/common/subprocess.h"

namespace collective::bench {
namespace {

constexpr char kWorkloadFile[] = "tests/bench/workloads/resnet50_gradients.txt";
// Each sweep size moves about this much per rank, so large sizes take fewer
// iterations and the whole sweep stays within minutes.
constexpr uint64_t kSweepBytesPerSize = uint64_t{1} << 30;
constexpr int kMinSweepIterations = 5;

// The repository's workload file, looked for above the executable (build/bin
// sits two levels below the source tree) and then in the working directory.
std::string FindDefaultWorkload() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  fs::path directory = testing::ExecutableDirectory();
  for (int level = 0; level < 4 && !directory.empty(); ++level) {
    candidates.push_back(directory / kWorkloadFile);
    directory = directory.parent_path();
  }
  std::error_code ignored;
  candidates.push_back(fs::current_path(ignored) / kWorkloadFile);
  for (const auto& candidate : candidates) {
    if (fs::is_regular_file(candidate, ignored)) return fs::absolute(candidate).string();
  }
  return "";
}

absl::Status ParseSizes(const std::string& text, uint64_t* min_bytes, uint64_t* max_bytes) {
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], min_bytes) ||
      !absl::SimpleAtoi(parts[1], max_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sizes ", text, ": expected MIN:MAX in bytes, e.g. 8:268435456"));
  }
  if (*min_bytes < 4 || *min_bytes % 4 != 0 || *max_bytes < *min_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sizes ", text, ": MIN must be a positive multiple of 4 (float32) and at most MAX"));
  }
  if (*max_bytes > uint64_t{1} << 40) {
    return absl::InvalidArgumentError(absl::StrCat("--sizes ", text, ": MAX is above 1 TiB"));
  }
  return absl::OkStatus();
}

}  // namespace

OptionParser::OptionParser(CLI::App& app, BenchOptions& options) : options_(options) {
  app.add_option("--mode", mode_,
                 "what to measure: sweep (sizes), resnet (ResNet-50 gradient "
                 "step), latency (4-byte allreduce), or all (with an --op other "
                 "than allreduce: the sweep alone)")
      ->type_name("MODE")
      ->check(CLI::IsMember({"sweep", "resnet", "latency", "all"}))
      ->capture_default_str();
  app.add_option("--placement", placement_,
                 "where client tensors live: copy (private memory, copied in and out), zerocopy "
                 "(in the shared-memory arena, result viewed in place), both, or inplace "
                 "(allreduce and broadcast: in the arena, the daemon writing the result back into "
                 "it)")
      ->type_name("PLACEMENT")
      ->check(CLI::IsMember({"copy", "zerocopy", "both", "inplace"}))
      ->capture_default_str();
  app.add_option("--device", device_,
                 "where client tensors live: cpu (see --placement), or cuda (CUDA device memory "
                 "of the ranks' devices, local rank modulo the GPUs; results written into device "
                 "outputs, a step timed until its stream has them; bandwidth reported against "
                 "the device-to-device copy bandwidth measured in the same run)")
      ->type_name("DEVICE")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--clients,--clients-per-node", options_.clients,
                 "client processes (ranks) on each node; a job has N*K ranks")
      ->type_name("K")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--nodes", options_.nodes,
                 "stand-in nodes on this machine: with more than one, one mpirun starts a "
                 "collectived per node, each on its own socket in a private directory, and each "
                 "node's K clients talk to their own daemon; the MPI comparison runs N*K ranks")
      ->type_name("N")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--sizes", sizes_,
                 "sweep sizes in bytes, MIN:MAX, doubling. A size is what each rank puts in "
                 "(float32); allgather gives each rank R times that, R the ranks (N*K), and "
                 "gather the root. For alltoall, reducescatter and scatter each size is rounded "
                 "up to a multiple of 4*R bytes, so that it splits evenly among the ranks "
                 "(MPI_Alltoall and MPI_Reduce_scatter_block need that), and a size that "
                 "rounding repeats is "
                 "measured once")
      ->type_name("MIN:MAX")
      ->capture_default_str();
  app.add_option("--iterations", options_.iterations,
                 "most timed iterations per sweep size (large sizes run fewer, at least 5)")
      ->type_name("N")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--steps", options_.steps, "timed ResNet-50 steps")
      ->type_name("N")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--latency-iterations", options_.latency_iterations, "timed 4-byte allreduces")
      ->type_name("N")
      ->check(CLI::Range(1, 10000000))
      ->capture_default_str();
  std::vector<std::string> ops;
  for (const auto& [name, collective] : CollectiveNames()) ops.push_back(name);
  ops.insert(ops.end(), {"sum", "average"});
  app.add_option(
         "--op", op_,
         "collective of the size sweep: allreduce, allgather, broadcast (from rank 0), alltoall "
         "(even split), reducescatter (even split), reduce (to rank 0), gather (to rank 0), "
         "scatter (from rank 0, even split) or send (a ping-pong between two ranks, timed per "
         "round trip), against MPI_Allreduce (in place), MPI_Allgather, MPI_Bcast, "
         "MPI_Alltoall, MPI_Reduce_scatter_block, MPI_Reduce, MPI_Gatherv, MPI_Scatterv and "
         "MPI_Send/MPI_Recv. The ResNet step "
         "and the latency measure allreduce only: with another collective, --mode all runs the "
         "sweep alone. 'sum' and 'average' (the reduce op before --reduce-op existed) still "
         "mean allreduce with that --reduce-op")
      ->type_name("OP")
      ->check(CLI::IsMember(ops))
      ->capture_default_str();
  reduce_op_option_ =
      app.add_option("--reduce-op", reduce_op_, "reduction of allreduce and reducescatter")
          ->type_name("OP")
          ->check(CLI::IsMember({"sum", "average"}))
          ->capture_default_str();
  app.add_option("--workload", options_.workload,
                 "gradient list of the ResNet step (default: the repository's " +
                     std::string(kWorkloadFile) +
                     ", found above the executable or in the "
                     "working directory)")
      ->type_name("PATH");
  app.add_option("--socket", options_.socket,
                 "use the collectived listening here instead of starting a private one")
      ->type_name("PATH");
  app.add_option("--daemon-arg", options_.daemon_args,
                 "flag for each private collectived, repeatable, e.g. "
                 "--daemon-arg=--fusion-threshold-bytes=1048576")
      ->type_name("FLAG")
      ->allow_extra_args(false);
  app.add_option("--configs", options_.configs,
                 "compare daemon configurations in one run, each on daemons of its own: "
                 "defaults, autotune (the autotuner's trials run as untimed steps first, then "
                 "the timed steps measure the values it fixed), fusion=SIZE (a hand-set "
                 "fusion_threshold_bytes, e.g. fusion=4MiB); comma-separated")
      ->type_name("LIST")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](const std::string& value) -> std::string {
            if (value == "defaults" || value == "autotune" || value.rfind("fusion=", 0) == 0) {
              return "";
            }
            return "expected defaults, autotune or fusion=SIZE, not " + value;
          },
          "defaults|autotune|fusion=SIZE"));
  app.add_option("--autotune-trials", options_.autotune_trials,
                 "trials of the autotune configuration (--configs)")
      ->type_name("N")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--autotune-steps-per-sample", options_.autotune_steps_per_sample,
                 "ResNet steps per autotuning sample (--configs autotune)")
      ->type_name("N")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--compare", compare_,
                 "also run the workloads with the matching MPI collective over mpirun (see --op) "
                 "and print the ratios")
      ->type_name("SYSTEM")
      ->check(CLI::IsMember({"mpi", "none"}))
      ->capture_default_str();
  options_.mpirun = COLLECTIVE_MPIRUN;
  app.add_option("--mpirun", options_.mpirun, "the MPI launcher")
      ->type_name("PATH")
      ->capture_default_str();
  btl_option_ =
      app.add_option("--btl", options_.btl,
                     "Open MPI's transports, for the daemons of --nodes and the MPI comparison: "
                     "tcp,self (the default with several nodes: as across machines; on one "
                     "machine MPI's ranks of one stand-in node talk TCP as well) or vader,self "
                     "(shared memory; the default on one node)")
          ->type_name("BTL")
          ->check(CLI::Validator(
              [](const std::string& value) -> std::string {
                if (value == "tcp,self" || value == "vader,self") return "";
                return "expected tcp,self or vader,self, not " + value;
              },
              "tcp,self|vader,self"));
  app.add_option("--mpirun-arg", options_.mpirun_args,
                 "extra argument of every mpirun (the daemons' and the MPI comparison's), "
                 "repeatable (MCA parameters are easier as environment variables, e.g. "
                 "OMPI_MCA_mpi_yield_when_idle=1)")
      ->type_name("ARG")
      ->allow_extra_args(false);
  app.add_flag("--json", options_.json, "print one JSON object per measurement instead of tables");
  app.add_option("--timeout", options_.timeout_seconds,
                 "seconds each phase (one mode on one system) may take before the run fails")
      ->type_name("SECONDS")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  // The worker roles' options: set by the launcher, not meant for people.
  app.add_option("--role", role_)->check(CLI::IsMember({"launcher", "client", "mpi"}))->group("");
  app.add_option("--rank", options_.rank)->group("");
  app.add_option("--parent", options_.parent)->group("");
  app.add_option("--untimed-steps", options_.untimed_steps)->group("");
}

absl::Status OptionParser::FinishOptions() {
  options_.role = role_ == "client" ? Role::kClient : role_ == "mpi" ? Role::kMpi : Role::kLauncher;
  const bool reduce_op_given = reduce_op_option_->count() > 0;
  if (op_ == "sum" || op_ == "average") {
    // The old --op: the reduction of an allreduce.
    if (reduce_op_given && reduce_op_ != op_) {
      return absl::InvalidArgumentError(absl::StrCat("--op ", op_, " (allreduce with --reduce-op ",
                                                     op_, ") contradicts --reduce-op ",
                                                     reduce_op_));
    }
    reduce_op_ = op_;
  } else {
    for (const auto& [name, collective] : CollectiveNames()) {
      if (name == op_) options_.collective = collective;
    }
    if (reduce_op_given && !Reduces(options_.collective)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--reduce-op: ", op_,
                       " reduces nothing; only allreduce, reducescatter and reduce take one"));
    }
  }
  options_.reduce_op = reduce_op_ == "average" ? ReduceOp::kAverage : ReduceOp::kSum;
  options_.compare_mpi = compare_ == "mpi";
  if (options_.nodes > 1 && !options_.socket.empty()) {
    return absl::InvalidArgumentError(
        "--socket names one running daemon, one node; --nodes starts daemons of its own");
  }
  if (!options_.configs.empty() && !options_.socket.empty()) {
    return absl::InvalidArgumentError(
        "--configs starts daemons of its own for each configuration; --socket names one "
        "running daemon: drop one of them");
  }
  if (btl_option_->count() == 0) options_.btl = options_.nodes > 1 ? "tcp,self" : "vader,self";
  const bool allreduce = options_.collective == Collective::kAllreduce;
  if (options_.collective == Collective::kSend && options_.clients * options_.nodes != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--op send is a ping-pong between two ranks; this run has ",
        options_.clients * options_.nodes, " (--clients 2, or --nodes 2 --clients 1)"));
  }
  if (!allreduce && mode_ != "all" && mode_ != "sweep") {
    return absl::InvalidArgumentError(absl::StrCat("--mode ", mode_, " measures allreduce only; ",
                                                   op_, " has the size sweep (--mode sweep)"));
  }
  if (mode_ == "all" || mode_ == "sweep") options_.modes.push_back(BenchMode::kSweep);
  if (allreduce && (mode_ == "all" || mode_ == "resnet")) {
    options_.modes.push_back(BenchMode::kResnet);
  }
  if (allreduce && (mode_ == "all" || mode_ == "latency")) {
    options_.modes.push_back(BenchMode::kLatency);
  }
  if (device_ == "cuda") {
    if (placement_ != "both") {
      return absl::InvalidArgumentError(
          "--placement is where host tensors live; with --device cuda every tensor is in device "
          "memory: drop --placement");
    }
    if (options_.compare_mpi) {
      return absl::InvalidArgumentError(
          "--device cuda measures against the device-to-device copy bandwidth, not MPI; drop "
          "--compare mpi");
    }
    options_.placements.push_back(Placement::kCuda);
  } else if (placement_ == "inplace") {
    if (!allreduce && options_.collective != Collective::kBroadcast) {
      return absl::InvalidArgumentError(
          "--placement inplace measures allreduce and broadcast (the daemon writes the result "
          "into the arena over the input); use copy or zerocopy for the other collectives");
    }
    options_.placements.push_back(Placement::kInPlace);
  } else {
    if (placement_ != "zerocopy") options_.placements.push_back(Placement::kCopy);
    if (placement_ != "copy") options_.placements.push_back(Placement::kZeroCopy);
  }
  RETURN_IF_ERROR(ParseSizes(sizes_, &options_.min_bytes, &options_.max_bytes));
  const bool needs_workload = std::find(options_.modes.begin(), options_.modes.end(),
                                        BenchMode::kResnet) != options_.modes.end();
  if (needs_workload && options_.workload.empty()) {
    options_.workload = FindDefaultWorkload();
    if (options_.workload.empty()) {
      return absl::NotFoundError(
          absl::StrCat("cannot find ", kWorkloadFile, " above ", testing::ExecutableDirectory(),
                       " or in the working directory; name the file with --workload PATH"));
    }
  }
  // MPI counts elements in an int; allgather's output holds K times the input.
  const uint64_t largest = SweepSizes(options_).back();
  if (options_.compare_mpi &&
      AlgorithmBytes(options_.collective, largest, options_.ranks()) / sizeof(float) > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sizes: MPI takes at most 2^31-1 elements per buffer (",
                     CollectiveName(options_.collective), "); lower MAX or drop --compare mpi"));
  }
  if (needs_workload) {
    std::error_code ignored;
    options_.workload = std::filesystem::absolute(options_.workload, ignored).string();
  }
  return absl::OkStatus();
}

std::vector<std::string> WorkerArguments(const BenchOptions& options, Role role, BenchMode mode,
                                         Placement placement) {
  std::vector<std::string> args = {"--role",
                                   role == Role::kMpi ? "mpi" : "client",
                                   "--mode",
                                   ModeName(mode),
                                   "--nodes",
                                   std::to_string(options.nodes),
                                   "--clients",
                                   std::to_string(options.clients),
                                   "--sizes",
                                   absl::StrCat(options.min_bytes, ":", options.max_bytes),
                                   "--iterations",
                                   std::to_string(options.iterations),
                                   "--steps",
                                   std::to_string(options.steps),
                                   "--latency-iterations",
                                   std::to_string(options.latency_iterations),
                                   "--op",
                                   CollectiveName(options.collective),
                                   "--parent",
                                   std::to_string(::getpid())};
  if (Reduces(options.collective)) {
    args.insert(args.end(), {"--reduce-op", ReduceOpName(options.reduce_op)});
  }
  if (role == Role::kClient) {
    // A worker's own parser reads CUDA placement from --device, as the
    // launcher's did (--placement names host placements only).
    if (placement == Placement::kCuda) {
      args.insert(args.end(), {"--device", "cuda"});
    } else {
      args.insert(args.end(), {"--placement", PlacementName(placement)});
    }
  }
  if (mode == BenchMode::kResnet) {
    args.insert(args.end(), {"--workload", options.workload, "--untimed-steps",
                             std::to_string(options.untimed_steps)});
  }
  return args;
}

const char* ModeName(BenchMode mode) {
  switch (mode) {
    case BenchMode::kSweep:
      return "sweep";
    case BenchMode::kResnet:
      return "resnet";
    case BenchMode::kLatency:
      return "latency";
  }
  return "?";
}

const char* PlacementName(Placement placement) {
  switch (placement) {
    case Placement::kCopy:
      return "copy";
    case Placement::kZeroCopy:
      return "zerocopy";
    case Placement::kInPlace:
      return "inplace";
    case Placement::kCuda:
      return "cuda";
  }
  return "?";
}

const char* ReduceOpName(ReduceOp op) { return op == ReduceOp::kAverage ? "average" : "sum"; }

std::vector<uint64_t> SweepSizes(const BenchOptions& options) {
  const uint64_t unit = SplitsInput(options.collective)
                            ? sizeof(float) * static_cast<uint64_t>(options.ranks())
                            : sizeof(float);
  std::vector<uint64_t> sizes;
  for (uint64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 2) {
    const uint64_t size = (bytes + unit - 1) / unit * unit;
    if (sizes.empty() || sizes.back() != size) sizes.push_back(size);
  }
  return sizes;
}

int SweepIterations(const BenchOptions& options, uint64_t bytes) {
  const uint64_t moved = AlgorithmBytes(options.collective, bytes, options.ranks());
  const uint64_t affordable = std::max<uint64_t>(kSweepBytesPerSize / moved, kMinSweepIterations);
  return static_cast<int>(
      std::min<uint64_t>(affordable, static_cast<uint64_t>(options.iterations)));
}

int WarmupIterations(int timed) { return std::clamp(timed / 10, 2, 200); }

}  // namespace collective::bench
