#include "daemon/observe/process_metrics.h"

#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace collective::daemon::observe {
namespace {

std::string ReadProcFile(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buffer[4096];
  ssize_t got = 0;
  while ((got = ::read(fd, buffer, sizeof(buffer))) > 0) text.append(buffer, got);
  ::close(fd);
  return text;
}

// btime of /proc/stat: when the machine booted, in seconds since the epoch.
double BootTimeSeconds() {
  for (absl::string_view line : absl::StrSplit(ReadProcFile("/proc/stat"), '\n')) {
    uint64_t seconds = 0;
    if (absl::ConsumePrefix(&line, "btime ") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &seconds)) {
      return static_cast<double>(seconds);
    }
  }
  return 0;
}

// Entries of /proc/self/fd, less the one this count opens.
uint64_t CountOpenDescriptors() {
  DIR* directory = ::opendir("/proc/self/fd");
  if (directory == nullptr) return 0;
  uint64_t count = 0;
  while (const dirent* entry = ::readdir(directory)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(directory);
  return count > 0 ? count - 1 : 0;
}

}  // namespace

std::optional<ProcessStats> ParseProcStat(absl::string_view stat, double boot_time_seconds,
                                          long ticks_per_second, long page_bytes) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields are counted from after the last ')'. Field numbers below are
  // proc(5)'s.
  const size_t close = stat.rfind(')');
  if (close == absl::string_view::npos || ticks_per_second <= 0) return std::nullopt;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipWhitespace());
  // fields[0] is field 3 (state).
  auto field = [&fields](int number, uint64_t& value) {
    const size_t index = static_cast<size_t>(number - 3);
    return index < fields.size() && absl::SimpleAtoi(fields[index], &value);
  };
  uint64_t user = 0, system = 0, threads = 0, start = 0, virtual_bytes = 0, resident_pages = 0;
  if (!field(14, user) || !field(15, system) || !field(20, threads) || !field(22, start) ||
      !field(23, virtual_bytes) || !field(24, resident_pages)) {
    return std::nullopt;
  }
  const double ticks = static_cast<double>(ticks_per_second);
  ProcessStats stats;
  stats.cpu_seconds = static_cast<double>(user + system) / ticks;
  stats.threads = threads;
  stats.start_time_seconds = boot_time_seconds + static_cast<double>(start) / ticks;
  stats.virtual_bytes = virtual_bytes;
  stats.resident_bytes = resident_pages * static_cast<uint64_t>(page_bytes);
  return stats;
}

std::optional<ProcessStats> ReadProcessStats() {
  std::optional<ProcessStats> stats =
      ParseProcStat(ReadProcFile("/proc/self/stat"), BootTimeSeconds(), ::sysconf(_SC_CLK_TCK),
                    ::sysconf(_SC_PAGESIZE));
  if (!stats.has_value()) return std::nullopt;
  stats->open_fds = CountOpenDescriptors();
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) stats->max_fds = limit.rlim_cur;
  return stats;
}

void RenderProcessMetrics(const ProcessStats& stats, PrometheusText& out) {
  out.Family("process_cpu_seconds_total", "counter",
             "Total user and system CPU time spent in seconds.");
  out.Sample("process_cpu_seconds_total", {}, stats.cpu_seconds);
  out.Family("process_open_fds", "gauge", "Number of open file descriptors.");
  out.Sample("process_open_fds", {}, stats.open_fds);
  out.Family("process_max_fds", "gauge", "Maximum number of open file descriptors.");
  out.Sample("process_max_fds", {}, stats.max_fds);
  out.Family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
  out.Sample("process_virtual_memory_bytes", {}, stats.virtual_bytes);
  out.Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  out.Sample("process_resident_memory_bytes", {}, stats.resident_bytes);
  out.Family("process_start_time_seconds", "gauge",
             "Start time of the process since unix epoch in seconds.");
  out.Sample("process_start_time_seconds", {}, stats.start_time_seconds);
  out.Family("process_threads", "gauge", "Number of OS threads in the process.");
  out.Sample("process_threads", {}, stats.threads);
}

}  // namespace collective::daemon::observe
