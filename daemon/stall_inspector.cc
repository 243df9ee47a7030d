#include "daemon/stall_inspector.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace collective::daemon {
namespace {

// The report stays readable however large the job: this many tensors per
// rank, this many ranks.
constexpr size_t kNamesPerRank = 5;
constexpr size_t kRanksShown = 32;

// A rank in join waits, by design, for ranks that still have data: not a
// stall.
bool IsJoin(const PendingTensor& pending) {
  for (const auto& submission : pending.by_rank) {
    if (submission.has_value()) return submission->request.collective() == v1::COLLECTIVE_JOIN;
  }
  return false;
}

Clock::duration Seconds(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

StallInspector::StallInspector(double check_seconds, double shutdown_seconds)
    : check_(Seconds(check_seconds)), shutdown_(Seconds(shutdown_seconds)) {}

std::vector<StalledTensor> StallInspector::Inspect(Clock::time_point now,
                                                   const Coordinator& coordinator,
                                                   const ProcessSetTable& sets) {
  std::vector<StalledTensor> stalled;
  std::vector<StalledTensor> expired;
  if (!enabled()) return expired;
  const auto joined_of = [&](int32_t set_id) { return coordinator.Joined(set_id); };
  for (const auto& [key, pending] : coordinator.pending()) {
    const Clock::duration age = now - pending.first_at;
    if (age < check_ || IsJoin(pending)) continue;
    const ProcessSet* set = sets.Find(pending.process_set_id);
    const std::vector<int32_t> joined = joined_of(pending.process_set_id);
    StalledTensor tensor{pending.process_set_id, pending.name, {}, age};
    for (size_t rank = 0; rank < pending.by_rank.size(); ++rank) {
      if (pending.by_rank[rank].has_value() ||
          std::find(joined.begin(), joined.end(), static_cast<int32_t>(rank)) != joined.end()) {
        continue;
      }
      tensor.missing_ranks.push_back(set != nullptr ? set->ranks[rank]
                                                    : static_cast<int32_t>(rank));
    }
    if (shutdown_ > Clock::duration::zero() && age >= shutdown_) expired.push_back(tensor);
    stalled.push_back(std::move(tensor));
  }
  if (!stalled.empty() && now - last_report_ >= check_) {
    last_report_ = now;
    std::sort(stalled.begin(), stalled.end(),
              [](const StalledTensor& a, const StalledTensor& b) { return a.age > b.age; });
    log::Coord().warn(
        "One or more tensors were submitted by a subset of ranks and have waited more than {} s "
        "for the rest. This may mean that ranks submit different tensors, or that only some "
        "ranks submit, which deadlocks the job.{}\n{}",
        std::chrono::duration<double>(check_).count(),
        shutdown_ > Clock::duration::zero()
            ? absl::StrCat(" They fail after ", std::chrono::duration<double>(shutdown_).count(),
                           " s (stall_shutdown_seconds).")
            : "",
        FormatMissingRanks(stalled));
  }
  return expired;
}

std::string StallInspector::ShutdownMessage(const StalledTensor& tensor) const {
  return absl::StrCat("tensor '", tensor.name, "' of process set ", tensor.process_set_id,
                      " waited ", std::chrono::duration<double>(tensor.age).count(),
                      " s for ranks [", absl::StrJoin(tensor.missing_ranks, ", "),
                      "] to submit it and was failed (stall_shutdown_seconds is ",
                      std::chrono::duration<double>(shutdown_).count(), ")");
}

std::string FormatMissingRanks(const std::vector<StalledTensor>& stalled) {
  std::map<int32_t, std::vector<const std::string*>> by_rank;
  for (const StalledTensor& tensor : stalled) {
    for (int32_t rank : tensor.missing_ranks) by_rank[rank].push_back(&tensor.name);
  }
  std::string report = "Missing ranks:";
  size_t ranks = 0;
  for (const auto& [rank, names] : by_rank) {
    if (ranks++ == kRanksShown) {
      absl::StrAppend(&report, "\n... and ", by_rank.size() - kRanksShown, " more ranks");
      break;
    }
    absl::StrAppend(&report, "\n", rank, ": [");
    for (size_t i = 0; i < std::min(names.size(), kNamesPerRank); ++i) {
      absl::StrAppend(&report, i == 0 ? "" : ", ", *names[i]);
    }
    if (names.size() > kNamesPerRank) {
      absl::StrAppend(&report, " ... and ", names.size() - kNamesPerRank, " more");
    }
    absl::StrAppend(&report, "]");
  }
  return report;
}

}  // namespace collective::daemon
