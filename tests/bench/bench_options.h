// collective-bench's options: what to measure, where the tensors live, and
// what to compare against. The launcher parses them from its command line and
// hands the same values to the worker processes it starts, so every process
// of a run derives the same schedule (sizes, iterations, warm-up) from them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <sys/types.h>

#include <CLI/CLI.hpp>

#include "absl/status/status.h"
#include "collective/types.h"
#include "tests/bench/collectives.h"

namespace collective::bench {

enum class BenchMode { kSweep, kResnet, kLatency };
// Where a client's tensors live: private memory, copied into the arena and
// the result copied out (kCopy), the arena itself, the result read as a
// view of the daemon's result segment (kZeroCopy), the arena reduced in
// place, the daemon writing the result back into it (kInPlace, allreduce
// and broadcast: hvd.zeros tensors with allreduce_ or broadcast_, like
// MPI_Allreduce in place and MPI_Bcast), or
// CUDA device memory, the result written into a device output (kCuda,
// --device cuda).
enum class Placement { kCopy, kZeroCopy, kInPlace, kCuda };
// The launcher starts the daemon and the workers; a client worker is one rank
// of a collectived job; an MPI worker is one rank under mpirun.
enum class Role { kLauncher, kClient, kMpi };

struct BenchOptions {
  Role role = Role::kLauncher;
  int rank = 0;      // worker roles
  pid_t parent = 0;  // worker roles: the launcher, whose death ends the worker

  std::vector<BenchMode> modes;
  std::vector<Placement> placements;
  // Stand-in nodes, each a collectived of its own (several: started by one
  // mpirun on this machine), and the client processes of each.
  int nodes = 1;
  int clients = 4;
  uint64_t min_bytes = 8;
  uint64_t max_bytes = uint64_t{256} << 20;
  int iterations = 100;  // most timed iterations per sweep size
  int steps = 20;
  int latency_iterations = 2000;
  // What the sweep measures; the ResNet step and the latency are allreduces.
  Collective collective = Collective::kAllreduce;
  // Allreduce and reducescatter: kSum or kAverage.
  ReduceOp reduce_op = ReduceOp::kSum;
  std::string workload;

  std::string socket;  // empty: start a private daemon
  std::vector<std::string> daemon_args;
  // Daemon configurations compared in one run, each on daemons of its own
  // (after the --daemon-arg flags): "defaults", "autotune", or
  // "fusion=SIZE"; empty: one configuration, the --daemon-arg flags'.
  std::vector<std::string> configs;
  // The autotune configuration's budget: trials, and steps per sample.
  int autotune_trials = 20;
  int autotune_steps_per_sample = 5;
  // Client workers: steps before the warm-up and the timed steps, not timed
  // (while the autotuner tries values).
  int untimed_steps = 0;
  bool compare_mpi = false;
  std::string mpirun;
  // Open MPI's byte transfer layers, for the daemons' world and the MPI
  // comparison alike: "tcp,self" (as across machines) or "vader,self".
  std::string btl;
  std::vector<std::string> mpirun_args;

  bool json = false;
  int timeout_seconds = 600;

  // The ranks of a job: every client of every node (and as many MPI ranks).
  int ranks() const { return nodes * clients; }
};

// Declares every option on `app`; the values land in `options` when it parses.
// Call FinishOptions after parsing.
class OptionParser {
 public:
  OptionParser(CLI::App& app, BenchOptions& options);
  // Converts and checks what the strings said; resolves the default workload.
  absl::Status FinishOptions();

 private:
  BenchOptions& options_;
  std::string role_ = "launcher";
  std::string mode_ = "all";
  std::string placement_ = "both";
  std::string device_ = "cpu";
  std::string sizes_ = "8:268435456";
  std::string op_ = "allreduce";
  std::string reduce_op_ = "sum";
  std::string compare_ = "none";
  CLI::Option* btl_option_ = nullptr;
  CLI::Option* reduce_op_option_ = nullptr;
};

// The arguments that make this executable play `role` for one mode (and, for
// client workers, one placement) of the run `options` describes.
std::vector<std::string> WorkerArguments(const BenchOptions& options, Role role, BenchMode mode,
                                         Placement placement);

const char* ModeName(BenchMode mode);
const char* PlacementName(Placement placement);
const char* ReduceOpName(ReduceOp op);

// The sweep's sizes, each the bytes one rank puts in: min_bytes doubling up
// to max_bytes. For alltoall and reducescatter each is rounded up to a
// multiple of 4·R bytes (R float32 elements, R = options.ranks(), so that
// the input splits evenly among the ranks, as MPI_Alltoall and
// MPI_Reduce_scatter_block need), and a size that rounding repeats is
// measured once.
std::vector<uint64_t> SweepSizes(const BenchOptions& options);
// Timed iterations for one sweep size: options.iterations, fewer for large
// sizes (each size moves about 1 GiB of algbw bytes per rank), but at least 5.
int SweepIterations(const BenchOptions& options, uint64_t bytes);
// Untimed iterations before `timed` ones: a tenth, at least 2.
int WarmupIterations(int timed);

}  // namespace collective::bench
