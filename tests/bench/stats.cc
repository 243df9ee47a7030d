#include "tests/bench/stats.h"

#include <algorithm>
#include <cmath>

namespace collective::bench {

Summary Summarize(std::vector<int64_t> nanos) {
  Summary summary;
  if (nanos.empty()) return summary;
  std::sort(nanos.begin(), nanos.end());
  const size_t n = nanos.size();
  summary.count = n;
  summary.median_ns =
      n % 2 == 1 ? static_cast<double>(nanos[n / 2])
                 : (static_cast<double>(nanos[n / 2 - 1]) + static_cast<double>(nanos[n / 2])) / 2;
  const auto p99_rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(n)));
  summary.p99_ns = static_cast<double>(nanos[std::clamp<size_t>(p99_rank, 1, n) - 1]);
  summary.min_ns = static_cast<double>(nanos.front());
  summary.max_ns = static_cast<double>(nanos.back());
  return summary;
}

}  // namespace collective::bench
