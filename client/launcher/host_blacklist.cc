#include "client/launcher/host_blacklist.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace collective::launcher {
namespace {

// Horovod's bounds (horovod/runner/elastic/discovery.py).
constexpr int kLowestCooldownSeconds = 1;
constexpr int kHighestCooldownSeconds = 60 * 60;

std::function<double()> UniformFromZeroToOne() {
  auto engine = std::make_shared<std::mt19937_64>(std::random_device{}());
  return [engine] { return std::uniform_real_distribution<double>(0.0, 1.0)(*engine); };
}

}  // namespace

absl::Status CheckCooldownRange(const CooldownRange& range) {
  if (range.min_seconds < kLowestCooldownSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Provided cooldown lower limit: ", range.min_seconds,
        " cannot be lower than default cooldown lower limit: ", kLowestCooldownSeconds));
  }
  if (range.max_seconds > kHighestCooldownSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Provided cooldown upper limit: ", range.max_seconds,
        " cannot be higher than default cooldown upper limit: ", kHighestCooldownSeconds));
  }
  return absl::OkStatus();
}

HostBlacklist::HostBlacklist(std::optional<CooldownRange> cooldown, std::function<double()> random)
    : cooldown_(cooldown), random_(random ? std::move(random) : UniformFromZeroToOne()) {}

std::optional<absl::Time> HostBlacklist::Add(int host, absl::Time now) {
  Entry& entry = hosts_[host];
  if (entry.out && (!entry.until.has_value() || now < *entry.until)) return entry.until;
  entry.out = true;
  if (!cooldown_.has_value()) {
    entry.until.reset();
    return std::nullopt;
  }
  ++entry.count;
  const double lower = cooldown_->min_seconds;
  const double delay = lower * std::ldexp(1.0, std::min(entry.count, 62)) + random_() * lower;
  const double seconds = std::max(lower, std::min<double>(cooldown_->max_seconds, delay));
  entry.until = now + absl::Seconds(seconds);
  return entry.until;
}

bool HostBlacklist::Contains(int host, absl::Time now) const {
  const auto it = hosts_.find(host);
  return it != hosts_.end() && it->second.out &&
         (!it->second.until.has_value() || now < *it->second.until);
}

std::vector<int> HostBlacklist::Resurrect(absl::Time now) {
  std::vector<int> back;
  for (auto& [host, entry] : hosts_) {
    if (entry.out && entry.until.has_value() && now >= *entry.until) {
      entry.out = false;
      back.push_back(host);
    }
  }
  return back;
}

std::string HostBlacklist::Describe(std::optional<absl::Time> until, absl::Time now) {
  if (!until.has_value()) return "for good";
  return absl::StrCat("for ", absl::FormatDuration(absl::Ceil(*until - now, absl::Seconds(1))));
}

}  // namespace collective::launcher
