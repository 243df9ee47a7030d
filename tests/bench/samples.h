// What a worker reports to the launcher: its per-iteration times, one line per
// series on stdout,
//
//   sample <key> <count> <ns> <ns> ...
//
// where the key names the series ("sweep/1024", "resnet", "latency"). Other
// lines are ignored, so stray output from a library cannot break a run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace collective::bench {

// Per-iteration times in nanoseconds, by series key.
using SeriesMap = std::map<std::string, std::vector<int64_t>>;

std::string FormatSeries(absl::string_view key, const std::vector<int64_t>& nanos);
absl::StatusOr<SeriesMap> ParseSeries(absl::string_view text);

// The time of each iteration is that of the slowest rank: a collective step
// is over only when every rank has its result. Every rank must report the
// same series with the same number of iterations.
absl::StatusOr<SeriesMap> SlowestRank(const std::vector<SeriesMap>& ranks);

std::string SweepKey(uint64_t bytes);
inline constexpr char kResnetKey[] = "resnet";
inline constexpr char kLatencyKey[] = "latency";

}  // namespace collective::bench
