#include "tests/bench/report.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace collective::bench {
namespace {

// A flat JSON object; our keys and values need no escaping beyond quotes and
// backslashes, and a number that is not finite becomes null.
class JsonObject {
 public:
  JsonObject& Str(const char* key, const std::string& value) {
    std::string escaped;
    for (char c : value) {
      if (c == '"' || c == '\\') escaped.push_back('\\');
      escaped.push_back(c);
    }
    return Raw(key, absl::StrCat("\"", escaped, "\""));
  }
  JsonObject& Int(const char* key, int64_t value) { return Raw(key, absl::StrCat(value)); }
  JsonObject& Num(const char* key, double value) {
    return Raw(key, std::isfinite(value) ? absl::StrFormat("%.6g", value) : "null");
  }
  std::string Line() const { return absl::StrCat("{", text_, "}\n"); }

 private:
  JsonObject& Raw(const char* key, const std::string& value) {
    absl::StrAppend(&text_, text_.empty() ? "" : ",", "\"", key, "\":", value);
    return *this;
  }
  std::string text_;
};

std::string Label(const Measurement& measurement) {
  return measurement.placement
             ? absl::StrCat(kCollectived, " ", PlacementName(*measurement.placement),
                            measurement.config.empty() ? "" : " " + measurement.config)
             : measurement.system;
}

// Bytes per nanosecond are GB/s.
double GBps(uint64_t bytes, double nanos) {
  return nanos > 0 ? static_cast<double>(bytes) / nanos : 0;
}

std::string Ratio(double ours, double mpi) {
  return absl::StrFormat("%.2f (speedup %.2fx)", ours / mpi, mpi / ours);
}

}  // namespace

Collective Report::CollectiveOf(BenchMode mode) const {
  return mode == BenchMode::kSweep ? info_.collective : Collective::kAllreduce;
}

double Report::AlgBw(const Measurement& m) const {
  return GBps(AlgorithmBytes(CollectiveOf(m.mode), m.bytes, info_.ranks()), m.time.median_ns);
}

double Report::BusBw(const Measurement& m) const {
  return AlgBw(m) * BusFactor(CollectiveOf(m.mode), info_.ranks());
}

double Report::FloorSeconds() const {
  return static_cast<double>(info_.clients_per_node + 1) *
         static_cast<double>(info_.workload_bytes) / info_.memcpy.traffic_bytes_per_second();
}

std::string Report::Clients() const {
  if (info_.nodes == 1) return absl::StrCat(info_.clients_per_node, " clients on 1 node");
  return absl::StrCat(info_.nodes, "x", info_.clients_per_node, " clients (", info_.nodes,
                      " nodes x ", info_.clients_per_node, " clients per node)");
}

const Measurement* Report::Find(const char* system, BenchMode mode,
                                std::optional<Placement> placement, uint64_t bytes) const {
  for (const Measurement& m : measurements_) {
    if (m.system == system && m.mode == mode && m.placement == placement && m.bytes == bytes) {
      return &m;
    }
  }
  return nullptr;
}

void Report::PrintHeader(const std::string& daemon) const {
  if (json_) return;
  std::string what = absl::StrCat("float32 ", ReduceOpName(info_.reduce_op), " allreduce");
  switch (info_.collective) {
    case Collective::kAllreduce:
      break;
    case Collective::kAllgather:
      what = "float32 allgather (sweep only)";
      break;
    case Collective::kBroadcast:
      what = absl::StrCat("float32 broadcast from rank ", kBroadcastRoot, " (sweep only)");
      break;
    case Collective::kAlltoall:
      what = "float32 alltoall, even split (sweep only)";
      break;
    case Collective::kReducescatter:
      what = absl::StrCat("float32 ", ReduceOpName(info_.reduce_op),
                          " reducescatter, even split (sweep only)");
      break;
    case Collective::kReduce:
      what = absl::StrCat("float32 ", ReduceOpName(info_.reduce_op), " reduce to rank ",
                          kBroadcastRoot, " (sweep only)");
      break;
    case Collective::kGather:
      what = absl::StrCat("float32 gather to rank ", kBroadcastRoot, " (sweep only)");
      break;
    case Collective::kScatter:
      what =
          absl::StrCat("float32 scatter from rank ", kBroadcastRoot, ", even split (sweep only)");
      break;
    case Collective::kSend:
      what = "float32 send/receive ping-pong between ranks 0 and 1, time = round trip (sweep only)";
      break;
  }
  std::fprintf(out_, "collective-bench: %s, %s, %s\n", Clients().c_str(), what.c_str(),
               daemon.c_str());
  std::fprintf(out_,
               "memcpy: %.2f GB/s copied (%.2f GB/s of memory traffic, read + write), %d threads, "
               "%llu MiB\n",
               info_.memcpy.copy_bytes_per_second / 1e9,
               info_.memcpy.traffic_bytes_per_second() / 1e9, info_.memcpy.threads,
               static_cast<unsigned long long>(info_.memcpy.bytes >> 20));
  std::fprintf(out_,
               "results: every collectived rank checks each of its results after its time is "
               "taken; MPI ranks check every result of the collectives other than allreduce, and "
               "the first of each allreduce series (in place, its data grows)\n");
  if (info_.device_copy_bytes_per_second > 0) {
    std::fprintf(out_,
                 "device-to-device copy on GPU 0: %.1f GB/s; a CUDA step is timed until the "
                 "rank's stream has its results\n",
                 info_.device_copy_bytes_per_second / 1e9);
  }
  std::fprintf(out_, "times: per iteration, of the slowest rank%s\n",
               info_.compare_mpi
                   ? "; ratio = collectived time / MPI time, speedup = MPI time / collectived time"
                   : "");
  std::fflush(out_);
}

void Report::Add(Measurement measurement) {
  measurements_.push_back(std::move(measurement));
  if (json_) {
    const std::string line = JsonLine(measurements_.back());
    std::fwrite(line.data(), 1, line.size(), out_);
    std::fflush(out_);
  }
}

std::string Report::JsonLine(const Measurement& m) const {
  JsonObject json;
  json.Str("system", m.system).Str("mode", ModeName(m.mode));
  if (m.placement) json.Str("placement", PlacementName(*m.placement));
  if (!m.config.empty()) json.Str("config", m.config);
  const Collective collective = CollectiveOf(m.mode);
  json.Str("op", CollectiveName(collective));
  if (Reduces(collective)) json.Str("reduce_op", ReduceOpName(info_.reduce_op));
  if (collective == Collective::kBroadcast || collective == Collective::kReduce ||
      collective == Collective::kGather || collective == Collective::kScatter) {
    json.Int("root", kBroadcastRoot);
  }
  json.Str("dtype", "float32").Int("clients", info_.ranks());
  json.Int("nodes", info_.nodes).Int("clients_per_node", info_.clients_per_node);
  json.Int("verified_ranks", m.verified_ranks);
  const Measurement* mpi = m.system == kMpi ? nullptr : Find(kMpi, m.mode, std::nullopt, m.bytes);
  if (m.mode == BenchMode::kResnet) {
    json.Str("workload", info_.workload_name)
        .Int("tensors", static_cast<int64_t>(info_.workload_tensors))
        .Int("bytes", static_cast<int64_t>(m.bytes))
        .Int("steps", static_cast<int64_t>(m.time.count))
        .Num("step_ms", m.time.median_ns / 1e6)
        .Num("p99_ms", m.time.p99_ns / 1e6)
        .Num("min_ms", m.time.min_ns / 1e6);
    if (mpi != nullptr) json.Num("mpi_step_ms", mpi->time.median_ns / 1e6);
  } else {
    json.Int("bytes", static_cast<int64_t>(m.bytes))
        .Int("iterations", static_cast<int64_t>(m.time.count))
        .Num("median_us", m.time.median_ns / 1e3);
    if (m.mode == BenchMode::kLatency) json.Num("p50_us", m.time.median_ns / 1e3);
    if (m.mode == BenchMode::kLatency && info_.wakeup_floor.has_value()) {
      json.Num("wakeup_floor_p50_us", info_.wakeup_floor->last_wakes.median_ns / 1e3)
          .Num("wakeup_floor_each_wakes_p50_us", info_.wakeup_floor->each_wakes.median_ns / 1e3);
    }
    json.Num("p99_us", m.time.p99_ns / 1e3).Num("min_us", m.time.min_ns / 1e3);
    if (mpi != nullptr) json.Num("mpi_median_us", mpi->time.median_ns / 1e3);
    if (mpi != nullptr && m.mode == BenchMode::kLatency) {
      json.Num("mpi_p99_us", mpi->time.p99_ns / 1e3);
    }
  }
  json.Num("algbw_GBps", AlgBw(m)).Num("busbw_GBps", BusBw(m));
  if (mpi != nullptr) {
    json.Num("ratio_vs_mpi", m.time.median_ns / mpi->time.median_ns)
        .Num("speedup_vs_mpi", mpi->time.median_ns / m.time.median_ns);
  }
  if (m.placement == Placement::kCuda && info_.device_copy_bytes_per_second > 0) {
    json.Num("d2d_copy_GBps", info_.device_copy_bytes_per_second / 1e9)
        .Num("algbw_vs_d2d", VsDeviceCopy(m));
  }
  if (m.mode == BenchMode::kResnet && m.placement == Placement::kZeroCopy && HasFloor()) {
    json.Num("memcpy_GBps", info_.memcpy.copy_bytes_per_second / 1e9)
        .Num("memory_traffic_GBps", info_.memcpy.traffic_bytes_per_second() / 1e9)
        .Num("floor_ms", FloorSeconds() * 1e3)
        .Num("vs_floor", m.time.median_ns / 1e9 / FloorSeconds());
  }
  return json.Line();
}

void Report::PrintMode(BenchMode mode) const {
  if (json_) return;
  switch (mode) {
    case BenchMode::kSweep:
      PrintSweep();
      break;
    case BenchMode::kResnet:
      PrintResnet();
      break;
    case BenchMode::kLatency:
      PrintLatency();
      break;
  }
  std::fflush(out_);
}

void Report::PrintSweep() const {
  std::vector<std::optional<Placement>> columns;
  std::set<uint64_t> sizes;
  for (const Measurement& m : measurements_) {
    if (m.mode != BenchMode::kSweep) continue;
    sizes.insert(m.bytes);
    if (std::find(columns.begin(), columns.end(), m.placement) == columns.end()) {
      columns.push_back(m.placement);
    }
  }
  // MPI last, the column the ratios refer to.
  std::stable_sort(columns.begin(), columns.end(),
                   [](const auto& a, const auto& b) { return a.has_value() && !b.has_value(); });
  const bool have_mpi = std::find(columns.begin(), columns.end(), std::nullopt) != columns.end();
  const Collective collective = info_.collective;
  const std::string ranks = info_.nodes == 1 ? absl::StrCat(info_.ranks())
                                             : absl::StrCat(info_.ranks(), " (", info_.nodes, "x",
                                                            info_.clients_per_node, ")");
  std::string bandwidth;
  switch (collective) {
    case Collective::kAllreduce:
      bandwidth = "busbw = bytes/time * 2(K-1)/K";
      break;
    case Collective::kAllgather:
      bandwidth = "busbw = K*bytes/time * (K-1)/K (each rank receives K*bytes)";
      break;
    case Collective::kBroadcast:
    case Collective::kReduce:
      bandwidth = "busbw = bytes/time";
      break;
    case Collective::kSend:
      bandwidth = "busbw = 2*bytes/time (a message each way)";
      break;
    case Collective::kAlltoall:
    case Collective::kReducescatter:
    case Collective::kScatter:
      bandwidth = "busbw = bytes/time * (K-1)/K";
      break;
    case Collective::kGather:
      bandwidth = "busbw = K*bytes/time * (K-1)/K (the root receives K*bytes)";
      break;
  }
  std::fprintf(out_,
               "\nsize sweep, %s: bytes = each rank's input, K = %s ranks; median time in us, bus "
               "bandwidth in GB/s (%s)%s\n%12s %6s",
               CollectiveName(collective), ranks.c_str(), bandwidth.c_str(),
               have_mpi ? ", time ratio to MPI and speedup" : "", "bytes", "iters");
  for (const auto& column : columns) {
    const std::string name = column ? PlacementName(*column) : "mpi";
    std::fprintf(out_, " | %10s %6s", (name + " us").c_str(), "busbw");
  }
  for (const auto& column : columns) {
    if (column && have_mpi) {
      std::fprintf(out_, " | %13s", (std::string(PlacementName(*column)) + "/mpi").c_str());
    }
  }
  const bool on_gpu = std::find(columns.begin(), columns.end(), Placement::kCuda) != columns.end();
  if (on_gpu) std::fprintf(out_, " | %11s", "algbw/d2d");
  std::fprintf(out_, "\n");
  for (const uint64_t bytes : sizes) {
    const Measurement* any = nullptr;
    for (const auto& column : columns) {
      if (any == nullptr) {
        any = Find(column ? kCollectived : kMpi, BenchMode::kSweep, column, bytes);
      }
    }
    std::fprintf(out_, "%12llu %6zu", static_cast<unsigned long long>(bytes),
                 any ? any->time.count : 0);
    for (const auto& column : columns) {
      const Measurement* m = Find(column ? kCollectived : kMpi, BenchMode::kSweep, column, bytes);
      if (m == nullptr) {
        std::fprintf(out_, " | %10s %6s", "-", "-");
      } else {
        std::fprintf(out_, " | %10.1f %6.2f", m->time.median_ns / 1e3, BusBw(*m));
      }
    }
    const Measurement* mpi = Find(kMpi, BenchMode::kSweep, std::nullopt, bytes);
    for (const auto& column : columns) {
      if (!column || !have_mpi) continue;
      const Measurement* m = Find(kCollectived, BenchMode::kSweep, column, bytes);
      if (m != nullptr && mpi != nullptr) {
        std::fprintf(out_, " | %5.2f %6.2fx", m->time.median_ns / mpi->time.median_ns,
                     mpi->time.median_ns / m->time.median_ns);
      } else {
        std::fprintf(out_, " | %13s", "-");
      }
    }
    if (on_gpu) {
      const Measurement* m = Find(kCollectived, BenchMode::kSweep, Placement::kCuda, bytes);
      std::fprintf(out_, " | %11s", m ? absl::StrFormat("%.2f", VsDeviceCopy(*m)).c_str() : "-");
    }
    std::fprintf(out_, "\n");
  }
}

double Report::VsDeviceCopy(const Measurement& m) const {
  return info_.device_copy_bytes_per_second > 0
             ? AlgBw(m) * 1e9 / info_.device_copy_bytes_per_second
             : 0;
}

void Report::PrintResnet() const {
  const Measurement* mpi = Find(kMpi, BenchMode::kResnet, std::nullopt, info_.workload_bytes);
  std::fprintf(out_,
               "\n%s gradient step: %zu tensors, %.1f MB per rank, all submitted then all "
               "waited\n",
               info_.workload_name.c_str(), info_.workload_tensors,
               static_cast<double>(info_.workload_bytes) / 1e6);
  // With --configs: each step's median against the defaults' of the same
  // placement (above 1: faster than the defaults).
  int width = 22;
  bool configs = false;
  for (const Measurement& m : measurements_) {
    if (m.mode != BenchMode::kResnet) continue;
    width = std::max(width, static_cast<int>(Label(m).size()));
    configs = configs || !m.config.empty();
  }
  auto defaults_of = [&](const Measurement& m) -> const Measurement* {
    for (const Measurement& d : measurements_) {
      if (d.mode == BenchMode::kResnet && d.config == "defaults" && d.placement == m.placement) {
        return &d;
      }
    }
    return nullptr;
  };
  std::fprintf(out_, "  %-*s %6s %9s %9s %10s %10s %s  %s\n", width, "system", "steps", "step ms",
               "p99 ms", "algbw GB/s", "busbw GB/s", configs ? "vs defaults" : "",
               mpi ? "vs mpi" : "");
  for (const Measurement& m : measurements_) {
    if (m.mode != BenchMode::kResnet) continue;
    const Measurement* defaults = m.placement ? defaults_of(m) : nullptr;
    const std::string vs_defaults =
        defaults != nullptr ? absl::StrFormat("%11.3f", defaults->time.median_ns / m.time.median_ns)
                            : std::string(configs ? 11 : 0, ' ');
    std::fprintf(out_, "  %-*s %6zu %9.2f %9.2f %10.2f %10.2f %s  %s\n", width, Label(m).c_str(),
                 m.time.count, m.time.median_ns / 1e6, m.time.p99_ns / 1e6, AlgBw(m), BusBw(m),
                 vs_defaults.c_str(),
                 mpi && &m != mpi ? Ratio(m.time.median_ns, mpi->time.median_ns).c_str() : "");
  }
  const Measurement* cuda =
      Find(kCollectived, BenchMode::kResnet, Placement::kCuda, info_.workload_bytes);
  if (cuda != nullptr && info_.device_copy_bytes_per_second > 0) {
    std::fprintf(
        out_,
        "  algbw is %.2fx the device-to-device copy bandwidth (%.1f GB/s); copying the "
        "step's %.1f MB once within a GPU takes %.2f ms\n",
        VsDeviceCopy(*cuda), info_.device_copy_bytes_per_second / 1e9,
        static_cast<double>(info_.workload_bytes) / 1e6,
        static_cast<double>(info_.workload_bytes) / info_.device_copy_bytes_per_second * 1e3);
  }
  const Measurement* zerocopy =
      Find(kCollectived, BenchMode::kResnet, Placement::kZeroCopy, info_.workload_bytes);
  if (zerocopy != nullptr && HasFloor()) {
    std::fprintf(
        out_,
        "  memory-traffic floor: (K+1)*n = %.1f MB at %.2f GB/s (memcpy, read + write) = %.2f "
        "ms; the zero-copy step takes %.2fx the floor\n",
        static_cast<double>(info_.clients_per_node + 1) *
            static_cast<double>(info_.workload_bytes) / 1e6,
        info_.memcpy.traffic_bytes_per_second() / 1e9, FloorSeconds() * 1e3,
        zerocopy->time.median_ns / 1e9 / FloorSeconds());
  }
}

void Report::PrintLatency() const {
  const Measurement* mpi = Find(kMpi, BenchMode::kLatency, std::nullopt, sizeof(float));
  std::fprintf(out_, "\n4-byte allreduce latency\n  %-22s %7s %9s %9s %9s   %s\n", "system",
               "iters", "p50 us", "p99 us", "min us", mpi ? "p50 vs mpi" : "");
  for (const Measurement& m : measurements_) {
    if (m.mode != BenchMode::kLatency) continue;
    std::fprintf(out_, "  %-22s %7zu %9.1f %9.1f %9.1f   %s\n", Label(m).c_str(), m.time.count,
                 m.time.median_ns / 1e3, m.time.p99_ns / 1e3, m.time.min_ns / 1e3,
                 mpi && &m != mpi ? Ratio(m.time.median_ns, mpi->time.median_ns).c_str() : "");
  }
  if (!info_.wakeup_floor.has_value()) return;
  const Summary& floor = info_.wakeup_floor->last_wakes;
  const Summary& each = info_.wakeup_floor->each_wakes;
  std::fprintf(out_,
               "  wake-up floor: %d processes hand a step to one more and are woken back "
               "(futex, nothing done)\n"
               "    the last arrival wakes it:  p50 %.1f us, p99 %.1f us, min %.1f us\n"
               "    every arrival wakes it:     p50 %.1f us, p99 %.1f us, min %.1f us\n",
               info_.clients_per_node, floor.median_ns / 1e3, floor.p99_ns / 1e3,
               floor.min_ns / 1e3, each.median_ns / 1e3, each.p99_ns / 1e3, each.min_ns / 1e3);
  for (const Measurement& m : measurements_) {
    if (m.mode != BenchMode::kLatency || m.system != kCollectived) continue;
    std::fprintf(out_, "  %-22s p50 = %.2fx the wake-up floor\n", Label(m).c_str(),
                 m.time.median_ns / floor.median_ns);
  }
}

}  // namespace collective::bench
