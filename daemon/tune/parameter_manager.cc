#include "daemon/tune/parameter_manager.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace collective::daemon::tune {
namespace {

// The ranges searched. Sizes on a log scale (a step from 64 KiB to 128 KiB
// matters as much as one from 32 MiB to 64 MiB), rounded to 4 KiB.
constexpr uint64_t kMinFusion = 64ull << 10;
constexpr uint64_t kMaxFusion = 256ull << 20;
constexpr uint64_t kMinChunk = 256ull << 10;
constexpr uint64_t kMaxChunk = 64ull << 20;
constexpr uint32_t kMinCycleMs = 1;
constexpr uint32_t kMaxCycleMs = 10;
constexpr uint64_t kRounding = 4ull << 10;

uint64_t FromLogScale(double unit, uint64_t low, uint64_t high) {
  const double bytes =
      std::exp2(std::log2(static_cast<double>(low)) + unit * (std::log2(static_cast<double>(high)) -
                                                              std::log2(static_cast<double>(low))));
  const uint64_t rounded = static_cast<uint64_t>(std::llround(bytes / kRounding)) * kRounding;
  return std::clamp(rounded, low, high);
}

double ToLogScale(uint64_t bytes, uint64_t low, uint64_t high) {
  if (high <= low) return 0;
  const double clamped = static_cast<double>(std::clamp(bytes, low, high));
  return (std::log2(clamped) - std::log2(static_cast<double>(low))) /
         (std::log2(static_cast<double>(high)) - std::log2(static_cast<double>(low)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterManager>> ParameterManager::Create(
    const Options& options, const TunedValues& initial) {
  std::ofstream log;
  if (!options.log_file.empty()) {
    log.open(options.log_file, std::ios::out | std::ios::trunc);
    if (!log) {
      return absl::FailedPreconditionError(
          absl::StrCat("The autotune log file '", options.log_file,
                       "' cannot be opened for writing; check that its directory exists and "
                       "that the daemon's user may write there."));
    }
    log << "trial,fusion_threshold_bytes,cycle_time_ms,cross_node_chunk_bytes,"
           "score_bytes_per_second\n"
        << std::flush;
  }
  return std::unique_ptr<ParameterManager>(new ParameterManager(options, initial, std::move(log)));
}

ParameterManager::ParameterManager(const Options& options, const TunedValues& initial,
                                   std::ofstream log)
    : options_(options),
      optimizer_({.dimensions = options.across_nodes ? 3 : 1, .seed = options.seed}),
      log_(std::move(log)),
      values_(initial),
      tuning_(options.max_samples > 0),
      warmup_left_(std::max(options.warmup_samples, 0)) {}

TunedValues ParameterManager::ToValues(const std::vector<double>& point) const {
  TunedValues values = values_;
  values.fusion_threshold_bytes = FromLogScale(
      point[0], kMinFusion, std::max(kMinFusion, std::min(kMaxFusion, options_.max_fusion_bytes)));
  if (options_.across_nodes) {
    values.cycle_time_ms =
        kMinCycleMs + static_cast<uint32_t>(
                          std::lround(point[1] * static_cast<double>(kMaxCycleMs - kMinCycleMs)));
    values.cross_node_chunk_bytes = FromLogScale(point[2], kMinChunk, kMaxChunk);
  }
  return values;
}

std::vector<double> ParameterManager::ToPoint(const TunedValues& values) const {
  std::vector<double> point{
      ToLogScale(values.fusion_threshold_bytes, kMinFusion,
                 std::max(kMinFusion, std::min(kMaxFusion, options_.max_fusion_bytes)))};
  if (options_.across_nodes) {
    point.push_back(static_cast<double>(std::clamp(values.cycle_time_ms, kMinCycleMs, kMaxCycleMs) -
                                        kMinCycleMs) /
                    static_cast<double>(kMaxCycleMs - kMinCycleMs));
    point.push_back(ToLogScale(values.cross_node_chunk_bytes, kMinChunk, kMaxChunk));
  }
  return point;
}

void ParameterManager::Log(const std::string& trial, const TunedValues& values, double score) {
  if (!log_.is_open()) return;
  log_ << trial << ',' << values.fusion_threshold_bytes << ',' << values.cycle_time_ms << ','
       << values.cross_node_chunk_bytes << ',' << static_cast<uint64_t>(std::llround(score)) << '\n'
       << std::flush;
}

std::optional<TunedValues> ParameterManager::Scored(double score) {
  if (warmup_left_ > 0) {
    --warmup_left_;
    return std::nullopt;
  }
  trials_.push_back({values_, score});
  Log(absl::StrCat(trials_.size()), values_, score);
  // The configured values (the first trial) may lie outside the searched
  // ranges: the optimizer learns from where they fall on its scale.
  optimizer_.Observe(ToPoint(values_), score);
  best_score_ = std::max(best_score_, score);
  if (static_cast<int>(trials_.size()) < options_.max_samples) {
    TunedValues next = ToValues(optimizer_.Propose());
    if (next == values_) return std::nullopt;
    values_ = next;
    return values_;
  }
  // The best measured values, never a prediction: the configured values
  // are the first trial, so the outcome is never worse than them as
  // measured.
  const Trial& best =
      *std::max_element(trials_.begin(), trials_.end(),
                        [](const Trial& a, const Trial& b) { return a.score < b.score; });
  tuning_ = false;
  Log("best", best.values, best.score);
  if (best.values == values_) return std::nullopt;
  values_ = best.values;
  return values_;
}

std::optional<TunedValues> ParameterManager::Update(const std::vector<std::string>& tensors,
                                                    uint64_t bytes, Clock::time_point now) {
  if (!tuning_ || tensors.empty()) return std::nullopt;
  if (!started_) {
    started_ = true;
    sample_start_ = now;
    sample_bytes_ = bytes;
    for (const std::string& tensor : tensors) ++seen_[tensor];
    return std::nullopt;
  }
  const bool next_step = std::any_of(tensors.begin(), tensors.end(), [&](const std::string& name) {
    auto it = seen_.find(name);
    return it != seen_.end() && it->second >= options_.steps_per_sample;
  });
  if (!next_step) {
    sample_bytes_ += bytes;
    for (const std::string& tensor : tensors) ++seen_[tensor];
    return std::nullopt;
  }
  // From the first batch of the sample's first step to the first batch of
  // the step after its last: whole steps, and the bytes they moved.
  const double seconds = std::chrono::duration<double>(now - sample_start_).count();
  const double score = seconds > 0 ? static_cast<double>(sample_bytes_) / seconds : 0;
  sample_start_ = now;
  sample_bytes_ = bytes;
  seen_.clear();
  for (const std::string& tensor : tensors) ++seen_[tensor];
  return Scored(score);
}

}  // namespace collective::daemon::tune
