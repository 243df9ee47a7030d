// Order statistics of a series of per-iteration times.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace collective::bench {

struct Summary {
  size_t count = 0;
  double median_ns = 0;
  double p99_ns = 0;
  double min_ns = 0;
  double max_ns = 0;
};

// Median (the mean of the two middle values for an even count) and p99 (the
// nearest rank); all zero for an empty series.
Summary Summarize(std::vector<int64_t> nanos);

}  // namespace collective::bench
