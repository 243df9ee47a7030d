// The stall inspector: Horovod's "Missing ranks" report. Tensors that some
// ranks of a process set submitted and others did not, for longer than
// stall_check_seconds, are logged (at most once per period) as which rank is
// missing which tensors; after stall_shutdown_seconds the inspector hands them
// back to be failed on every rank. Point-to-point halves that have waited
// as long for their peer are reported too, but never failed: as in MPI, a
// receive may wait for a send as long as the job runs.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "daemon/negotiation/coordinator.h"
#include "daemon/negotiation/message_matcher.h"

namespace collective::daemon::negotiation {

struct StalledTensor {
  int32_t process_set_id = 0;
  std::string name;
  std::vector<int32_t> missing_ranks;  // global ranks
  Clock::duration age{};
};

class StallInspector {
 public:
  StallInspector(double check_seconds, double shutdown_seconds);

  bool enabled() const { return check_ > Clock::duration::zero(); }
  Clock::duration check_after() const { return check_; }

  // Engine thread, from its timers, with every tensor some ranks wait on
  // (this node's, and across nodes node 0's). Logs the report when one is
  // due, and returns the tensors that have waited past the shutdown limit.
  std::vector<StalledTensor> Inspect(Clock::time_point now,
                                     const std::vector<WaitingTensor>& waiting);

  // The same report, at most once per period, of the sends and receives
  // (this node's halves) that have waited for their peer longer than
  // stall_check_seconds.
  void InspectMessages(Clock::time_point now, const std::vector<WaitingMessage>& waiting);

  // The text for a tensor failed by the shutdown limit.
  std::string ShutdownMessage(const StalledTensor& tensor) const;

 private:
  Clock::duration check_;
  Clock::duration shutdown_;
  Clock::time_point last_report_{};
  Clock::time_point last_message_report_{};
};

// "Missing ranks:\n 2: [a, b, c ... and 7 more]\n" for the report, bounded
// per rank and in all.
std::string FormatMissingRanks(const std::vector<StalledTensor>& stalled);

}  // namespace collective::daemon::negotiation
