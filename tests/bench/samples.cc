#include "tests/bench/samples.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace collective::bench {

std::string FormatSeries(absl::string_view key, int verified_ranks,
                         const std::vector<int64_t>& nanos) {
  return absl::StrCat("sample ", key, " ", verified_ranks, " ", nanos.size(), " ",
                      absl::StrJoin(nanos, " "), "\n");
}

absl::StatusOr<SeriesMap> ParseSeries(absl::string_view text) {
  // sample, key, verified ranks, count, then the times.
  constexpr size_t kTimes = 4;
  SeriesMap series;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() < kTimes || fields[0] != "sample") continue;
    Series& parsed = series[std::string(fields[1])];
    size_t count = 0;
    if (!absl::SimpleAtoi(fields[2], &parsed.verified_ranks) ||
        !absl::SimpleAtoi(fields[3], &count) || fields.size() != count + kTimes) {
      return absl::DataLossError(absl::StrCat("malformed sample line for '", fields[1], "'"));
    }
    parsed.nanos.resize(count);
    for (size_t i = 0; i < count; ++i) {
      if (!absl::SimpleAtoi(fields[i + kTimes], &parsed.nanos[i])) {
        return absl::DataLossError(
            absl::StrCat("bad time '", fields[i + kTimes], "' for '", fields[1], "'"));
      }
    }
  }
  return series;
}

absl::StatusOr<SeriesMap> SlowestRank(const std::vector<SeriesMap>& ranks) {
  if (ranks.empty()) return SeriesMap{};
  SeriesMap slowest = ranks[0];
  for (size_t rank = 1; rank < ranks.size(); ++rank) {
    if (ranks[rank].size() != slowest.size()) {
      return absl::DataLossError(absl::StrCat("rank ", rank, " reported ", ranks[rank].size(),
                                              " series, rank 0 ", slowest.size()));
    }
    for (auto& [key, series] : slowest) {
      auto other = ranks[rank].find(key);
      if (other == ranks[rank].end() || other->second.nanos.size() != series.nanos.size()) {
        return absl::DataLossError(
            absl::StrCat("rank ", rank, " did not report the same iterations of '", key, "'"));
      }
      series.verified_ranks += other->second.verified_ranks;
      for (size_t i = 0; i < series.nanos.size(); ++i) {
        series.nanos[i] = std::max(series.nanos[i], other->second.nanos[i]);
      }
    }
  }
  return slowest;
}

std::string SweepKey(uint64_t bytes) { return absl::StrCat("sweep/", bytes); }

}  // namespace collective::bench
