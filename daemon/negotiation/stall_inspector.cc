#include "daemon/negotiation/stall_inspector.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace collective::daemon::negotiation {
namespace {

// The report stays readable however large the job: this many tensors per
// rank, this many ranks.
constexpr size_t kNamesPerRank = 5;
constexpr size_t kRanksShown = 32;

Clock::duration Seconds(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

StallInspector::StallInspector(double check_seconds, double shutdown_seconds)
    : check_(Seconds(check_seconds)), shutdown_(Seconds(shutdown_seconds)) {}

std::vector<StalledTensor> StallInspector::Inspect(Clock::time_point now,
                                                   const std::vector<WaitingTensor>& waiting) {
  std::vector<StalledTensor> stalled;
  std::vector<StalledTensor> expired;
  if (!enabled()) return expired;
  for (const WaitingTensor& pending : waiting) {
    const Clock::duration age = now - pending.first_at;
    // A rank in join waits, by design, for ranks that still have data: not
    // a stall.
    if (age < check_ || pending.collective == v1::COLLECTIVE_JOIN) continue;
    StalledTensor tensor{pending.process_set_id, pending.name, pending.missing_ranks, age};
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

void StallInspector::InspectMessages(Clock::time_point now,
                                     const std::vector<WaitingMessage>& waiting) {
  if (!enabled() || now - last_message_report_ < check_) return;
  std::string report;
  size_t shown = 0;
  size_t stalled = 0;
  for (const WaitingMessage& half : waiting) {  // oldest first
    const Clock::duration age = now - half.since;
    if (age < check_) continue;
    if (++stalled > kRanksShown) continue;
    ++shown;
    const bool send = half.collective == v1::COLLECTIVE_SEND;
    absl::StrAppend(
        &report, "\n", half.rank, ": ", send ? "send to" : "receive from", " rank ", half.peer,
        " with tag ", half.tag,
        half.process_set_id == 0 ? "" : absl::StrCat(" (process set ", half.process_set_id, ")"),
        ", ", half.bytes, " bytes, waiting ",
        absl::StrFormat("%.1f", std::chrono::duration<double>(age).count()), " s");
  }
  if (stalled == 0) return;
  if (stalled > shown) absl::StrAppend(&report, "\n... and ", stalled - shown, " more");
  last_message_report_ = now;
  log::Coord().warn(
      "One or more point-to-point messages have waited more than {} s for the other rank's half "
      "(global ranks; a send or receive whose peer never posts its half waits as long as the "
      "job runs, as in MPI, and is not failed by stall_shutdown_seconds):{}",
      std::chrono::duration<double>(check_).count(), report);
}

std::string StallInspector::ShutdownMessage(const StalledTensor& tensor) const {
  return absl::StrCat("tensor '", tensor.name, "' of process set ", tensor.process_set_id,
                      " waited ", std::chrono::duration<double>(tensor.age).count(),
                      " s for ranks [", absl::StrJoin(tensor.missing_ranks, ", "),
                      "] to submit it and was failed (stall_shutdown_seconds is ",
                      std::chrono::duration<double>(shutdown_).count(), ")");
}

std::string FormatMissingRanks(const std::vector<StalledTensor>& stalled) {
  // A tensor waited on across nodes can come from this node's table and
  // from node 0's: each name once per rank.
  std::map<int32_t, std::vector<const std::string*>> by_rank;
  for (const StalledTensor& tensor : stalled) {
    for (int32_t rank : tensor.missing_ranks) {
      std::vector<const std::string*>& names = by_rank[rank];
      if (std::none_of(names.begin(), names.end(),
                       [&](const std::string* name) { return *name == tensor.name; })) {
        names.push_back(&tensor.name);
      }
    }
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

}  // namespace collective::daemon::negotiation
