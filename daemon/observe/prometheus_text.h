// Prometheus' text exposition format (version 0.0.4), as scrapers and
// `promtool check metrics` read it: metric families with HELP and TYPE lines,
// samples with escaped label values, and cumulative histogram buckets.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace collective::daemon::observe {

// Label names and values of one sample, in the order they are printed.
using Labels = std::vector<std::pair<absl::string_view, std::string>>;

// Observations counted into buckets with fixed upper bounds (ascending; +Inf
// is implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);

  void Observe(double value);

  const std::vector<double>& bounds() const { return bounds_; }
  // Observations per bucket, not cumulative; one more than bounds() (+Inf).
  const std::vector<uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

class PrometheusText {
 public:
  // Starts a family: the samples written after it belong to it. `type` is
  // counter, gauge or histogram.
  void Family(absl::string_view name, absl::string_view type, absl::string_view help);
  void Sample(absl::string_view name, const Labels& labels, uint64_t value);
  void Sample(absl::string_view name, const Labels& labels, double value);
  // name_bucket{le=...} (cumulative), name_sum and name_count.
  void Samples(absl::string_view name, const Histogram& histogram);

  const std::string& text() const { return text_; }

 private:
  void AppendName(absl::string_view name, const Labels& labels);

  std::string text_;
};

// Go's float syntax, which Prometheus parses: shortest exact digits, +Inf,
// -Inf, NaN.
std::string PrometheusNumber(double value);

}  // namespace collective::daemon::observe
