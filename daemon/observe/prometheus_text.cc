#include "daemon/observe/prometheus_text.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "absl/strings/str_cat.h"

namespace collective::daemon::observe {
namespace {

// HELP text escapes backslash and newline; label values also the quote.
std::string Escape(absl::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  // The first bucket whose upper bound holds the value (bounds are
  // inclusive in Prometheus: le = "less or equal").
  const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[static_cast<size_t>(bucket)];
  sum_ += value;
  ++count_;
}

std::string PrometheusNumber(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

void PrometheusText::Family(absl::string_view name, absl::string_view type,
                            absl::string_view help) {
  absl::StrAppend(&text_, "# HELP ", name, " ", Escape(help, false), "\n# TYPE ", name, " ", type,
                  "\n");
}

void PrometheusText::AppendName(absl::string_view name, const Labels& labels) {
  text_.append(name.data(), name.size());
  if (labels.empty()) return;
  text_ += '{';
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(&text_, i == 0 ? "" : ",", labels[i].first, "=\"",
                    Escape(labels[i].second, true), "\"");
  }
  text_ += '}';
}

void PrometheusText::Sample(absl::string_view name, const Labels& labels, uint64_t value) {
  AppendName(name, labels);
  absl::StrAppend(&text_, " ", value, "\n");
}

void PrometheusText::Sample(absl::string_view name, const Labels& labels, double value) {
  AppendName(name, labels);
  absl::StrAppend(&text_, " ", PrometheusNumber(value), "\n");
}

void PrometheusText::Samples(absl::string_view name, const Histogram& histogram) {
  const std::string bucket = absl::StrCat(name, "_bucket");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < histogram.counts().size(); ++i) {
    cumulative += histogram.counts()[i];
    const double bound = i < histogram.bounds().size() ? histogram.bounds()[i]
                                                       : std::numeric_limits<double>::infinity();
    Sample(bucket, {{"le", PrometheusNumber(bound)}}, cumulative);
  }
  Sample(absl::StrCat(name, "_sum"), {}, histogram.sum());
  Sample(absl::StrCat(name, "_count"), {}, histogram.count());
}

}  // namespace collective::daemon::observe
