// What a worker reports to the launcher: its per-iteration times, one line per
// series on stdout,
//
//   sample <key> <verified> <count> <ns> <ns> ...
//
// where the key names the series ("sweep/1024", "resnet", "latency") and
// <verified> counts the ranks that checked their results of the series (a
// client worker: itself; the line of the MPI ranks: every rank that did). A
// rank whose check fails reports nothing and fails the run; the count lets
// the launcher refuse times that no check stands behind. Other lines are
// ignored, so stray output from a library cannot break a run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace collective::bench {

struct Series {
  int verified_ranks = 0;
  std::vector<int64_t> nanos;  // per iteration
};

// By series key.
using SeriesMap = std::map<std::string, Series>;

std::string FormatSeries(absl::string_view key, int verified_ranks,
                         const std::vector<int64_t>& nanos);
absl::StatusOr<SeriesMap> ParseSeries(absl::string_view text);

// The time of each iteration is that of the slowest rank: a collective step
// is over only when every rank has its result; the verified ranks add up.
// Every rank must report the same series with the same number of iterations.
absl::StatusOr<SeriesMap> SlowestRank(const std::vector<SeriesMap>& ranks);

std::string SweepKey(uint64_t bytes);
inline constexpr char kResnetKey[] = "resnet";
inline constexpr char kLatencyKey[] = "latency";

}  // namespace collective::bench
