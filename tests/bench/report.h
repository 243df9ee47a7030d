// What collective-bench prints: one JSON object per measurement (--json), or
// a table per mode for people, with the ratios to MPI and, for the zero-copy
// ResNet step on one node, the distance from the memory-traffic floor; CUDA
// tensors' bandwidth as a fraction of the device-to-device copy bandwidth.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "tests/bench/bench_options.h"
#include "tests/bench/collectives.h"
#include "tests/bench/memcpy_bandwidth.h"
#include "tests/bench/stats.h"
#include "tests/bench/wakeup_floor.h"

namespace collective::bench {

inline constexpr char kCollectived[] = "collectived";
inline constexpr char kMpi[] = "mpi";

struct Measurement {
  std::string system;  // kCollectived or kMpi
  BenchMode mode = BenchMode::kSweep;
  std::optional<Placement> placement;  // collectived only
  // The daemon configuration (--configs): "defaults", "autotune",
  // "fusion=4MiB"; empty: the one configuration of the run.
  std::string config;
  // Per rank: one tensor's input (a sweep point: what each rank puts in), or
  // the whole workload.
  uint64_t bytes = 0;
  int verified_ranks = 0;  // that checked their results
  Summary time;            // per iteration, of the slowest rank
};

struct RunInfo {
  int nodes = 1;
  int clients_per_node = 0;
  Collective collective = Collective::kAllreduce;  // of the sweep
  ReduceOp reduce_op = ReduceOp::kSum;
  bool compare_mpi = false;
  std::string workload_name;  // "resnet50"
  size_t workload_tensors = 0;
  uint64_t workload_bytes = 0;
  MemcpyBandwidth memcpy;
  // --device cuda: bytes per second of a device-to-device copy on GPU 0.
  double device_copy_bytes_per_second = 0;
  // One node, latency mode: the clients' futex round trip through one more
  // process, with nothing done (wakeup_floor.h).
  std::optional<WakeupFloor> wakeup_floor;

  int ranks() const { return nodes * clients_per_node; }
};

class Report {
 public:
  Report(RunInfo info, bool json, std::FILE* out)
      : info_(std::move(info)), json_(json), out_(out) {}

  void PrintHeader(const std::string& daemon) const;
  // In JSON mode the line is printed at once; the ratio to MPI is in it when
  // MPI's measurement of the same point came first.
  void Add(Measurement measurement);
  // The table of one mode, once all its measurements are in (people only).
  void PrintMode(BenchMode mode) const;

 private:
  const Measurement* Find(const char* system, BenchMode mode, std::optional<Placement> placement,
                          uint64_t bytes) const;
  std::string JsonLine(const Measurement& measurement) const;
  void PrintSweep() const;
  void PrintResnet() const;
  void PrintLatency() const;
  // The sweep measures info_.collective; the other modes allreduce.
  Collective CollectiveOf(BenchMode mode) const;
  // The nccl-tests bandwidths of a measurement, in GB/s.
  double AlgBw(const Measurement& m) const;
  double BusBw(const Measurement& m) const;
  // Time of the zero-copy ResNet step at memory bandwidth: (K+1)·n bytes.
  // One node only: across nodes the network transfer bounds it instead.
  double FloorSeconds() const;
  bool HasFloor() const { return info_.nodes == 1; }
  // "4 clients", or "2x2 clients (2 nodes x 2 clients per node)".
  std::string Clients() const;
  // algbw / the device-to-device copy bandwidth (CUDA tensors).
  double VsDeviceCopy(const Measurement& m) const;

  RunInfo info_;
  bool json_;
  std::FILE* out_;
  std::vector<Measurement> measurements_;
};

}  // namespace collective::bench
