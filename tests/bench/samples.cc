#include "tests/bench/samples.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace collective::bench {

std::string FormatSeries(absl::string_view key, const std::vector<int64_t>& nanos) {
  return absl::StrCat("sample ", key, " ", nanos.size(), " ", absl::StrJoin(nanos, " "), "\n");
}

absl::StatusOr<SeriesMap> ParseSeries(absl::string_view text) {
  SeriesMap series;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() < 3 || fields[0] != "sample") continue;
    size_t count = 0;
    if (!absl::SimpleAtoi(fields[2], &count) || fields.size() != count + 3) {
      return absl::DataLossError(absl::StrCat("malformed sample line for '", fields[1], "'"));
    }
    std::vector<int64_t>& nanos = series[std::string(fields[1])];
    nanos.resize(count);
    for (size_t i = 0; i < count; ++i) {
      if (!absl::SimpleAtoi(fields[i + 3], &nanos[i])) {
        return absl::DataLossError(
            absl::StrCat("bad time '", fields[i + 3], "' for '", fields[1], "'"));
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
    for (auto& [key, nanos] : slowest) {
      auto other = ranks[rank].find(key);
      if (other == ranks[rank].end() || other->second.size() != nanos.size()) {
        return absl::DataLossError(
            absl::StrCat("rank ", rank, " did not report the same iterations of '", key, "'"));
      }
      for (size_t i = 0; i < nanos.size(); ++i) nanos[i] = std::max(nanos[i], other->second[i]);
    }
  }
  return slowest;
}

std::string SweepKey(uint64_t bytes) { return absl::StrCat("sweep/", bytes); }

}  // namespace collective::bench
