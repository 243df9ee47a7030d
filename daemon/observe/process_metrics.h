// The process_* series every Prometheus client library exports for its
// process (the names and meanings of client_golang's and client_python's
// process collectors), read from /proc/self when the metrics are rendered,
// so that the usual dashboards and alerts (restarts, CPU, memory,
// descriptors near the limit) work for collectived unchanged.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "daemon/observe/prometheus_text.h"

namespace collective::daemon::observe {

struct ProcessStats {
  double cpu_seconds = 0;  // user + system
  uint64_t resident_bytes = 0;
  uint64_t virtual_bytes = 0;
  uint64_t open_fds = 0;
  uint64_t max_fds = 0;           // the soft RLIMIT_NOFILE
  double start_time_seconds = 0;  // since the Unix epoch
  uint64_t threads = 0;
};

// `stat`: the text of /proc/<pid>/stat; `boot_time_seconds`: btime of
// /proc/stat. nullopt if `stat` cannot be parsed.
std::optional<ProcessStats> ParseProcStat(absl::string_view stat, double boot_time_seconds,
                                          long ticks_per_second, long page_bytes);

// This process's, or nullopt if /proc cannot be read (then no process_*
// series are rendered).
std::optional<ProcessStats> ReadProcessStats();

// The process_* families.
void RenderProcessMetrics(const ProcessStats& stats, PrometheusText& out);

}  // namespace collective::daemon::observe
