// The timeline: a Chrome-trace JSON file (chrome://tracing, Perfetto) of what
// the daemon did with each tensor — the negotiation wait with a mark for each
// rank's arrival, the queue wait, fusion copies, reductions, cross-node
// transfers, and each rank's copy-out — plus, on request, a mark per engine
// cycle. Started and stopped at run time; events are formatted by the engine
// thread and written by a writer thread of the timeline's own, so the engine
// never waits for the disk.
//
// File format: the JSON Array Format of the Trace Event Format: "[" then one
// event object per line separated by commas, and "]" when stopped (viewers
// also load a file cut short by a crash). Each tensor is one trace "process"
// (pid, named after the tensor with a process_name metadata event); thread 0
// carries the daemon's phases, thread 1 + r rank r's copy-out (named "rank
// r"). Timestamps are microseconds since Start. Marks that belong to no
// tensor (CYCLE, EVENTS_DROPPED) are global instants on pid 0.
//
// If the writer falls more than the queue bound behind (the disk stalls),
// events are dropped rather than queued without bound, and one global
// EVENTS_DROPPED instant with their count marks the gap once it caught up.
//
// A daemon has one timeline of its own, which records every job, and each
// job run one of its job alone; JobTimelines hands a job's events to both.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collective/v1/types.pb.h"
#include "daemon/exec/phases.h"
#include "daemon/job/peer_credentials.h"

namespace collective::daemon::observe {

struct RankArrival {
  int32_t rank = 0;    // within the tensor's process set
  uint64_t at_ns = 0;  // CLOCK_MONOTONIC
};

class Timeline {
 public:
  // How far (in formatted bytes) the writer may fall behind before events
  // are dropped.
  static constexpr uint64_t kDefaultMaxQueuedBytes = uint64_t{64} << 20;

  Timeline();
  explicit Timeline(uint64_t max_queued_bytes);
  ~Timeline();  // stops (and completes the file) if recording
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Creates or truncates `path` with the file-system identity of `owner`
  // (the caller of the RPC), so that nobody can make the daemon write where
  // they could not write themselves, and starts recording. The file is
  // opened on the calling thread (see job/open_as_owner.h).
  // FAILED_PRECONDITION if already recording; INVALID_ARGUMENT for a relative
  // path (the daemon's working directory means nothing to the caller);
  // PERMISSION_DENIED if the daemon cannot act as `owner`, another user; the
  // open error (naming the path) otherwise.
  absl::Status Start(const std::string& path, bool mark_cycles, const job::PeerCredentials& owner);
  // Writes what is queued, completes and closes the file. FAILED_PRECONDITION
  // if not recording. The recording ends in any case; a write error met on
  // the way (disk full) is returned here, the file then being incomplete.
  absl::Status Stop();

  // Any thread. path() and events_written() describe the recording under
  // way or, once stopped, the last one (events_written() counts the event
  // objects in the file, metadata included).
  bool active() const;
  bool mark_cycles() const;
  std::string path() const;
  uint64_t events_written() const;

  // Engine thread only; no-ops while not recording. Times are CLOCK_MONOTONIC
  // nanoseconds (one clock for every process of the host); events from before
  // Start are clipped to it, and an end before its start gives a zero
  // duration. `tensor` is the name shown for the row (any bytes; escaped).
  // CopyOut ignores a negative rank (no row to put it on); Cycle records
  // only when started with mark_cycles.
  void Negotiation(const std::string& tensor, v1::Collective collective, uint64_t first_ns,
                   uint64_t ready_ns, std::span<const RankArrival> arrivals);
  void Phase(const std::string& tensor, absl::string_view phase, uint64_t start_ns, uint64_t end_ns,
             uint64_t bytes);
  void CopyOut(const std::string& tensor, int32_t rank, uint64_t start_ns, uint64_t end_ns);
  void Cycle(uint64_t at_ns);

 private:
  class Writer;
  std::unique_ptr<Writer> writer_;
};

// Where one job's events go: the daemon's timeline and the job's own,
// each while it records. Same calls as Timeline's; engine thread only.
class JobTimelines {
 public:
  JobTimelines(Timeline& daemon, Timeline& job) : daemon_(daemon), job_(job) {}

  // Some timeline records this job's events.
  bool active() const { return daemon_.active() || job_.active(); }

  void Negotiation(const std::string& tensor, v1::Collective collective, uint64_t first_ns,
                   uint64_t ready_ns, std::span<const RankArrival> arrivals) {
    for (Timeline* timeline : {&daemon_, &job_}) {
      timeline->Negotiation(tensor, collective, first_ns, ready_ns, arrivals);
    }
  }
  void Phase(const std::string& tensor, absl::string_view phase, uint64_t start_ns, uint64_t end_ns,
             uint64_t bytes) {
    for (Timeline* timeline : {&daemon_, &job_}) {
      timeline->Phase(tensor, phase, start_ns, end_ns, bytes);
    }
  }
  void CopyOut(const std::string& tensor, int32_t rank, uint64_t start_ns, uint64_t end_ns) {
    for (Timeline* timeline : {&daemon_, &job_}) timeline->CopyOut(tensor, rank, start_ns, end_ns);
  }

 private:
  Timeline& daemon_;
  Timeline& job_;
};

}  // namespace collective::daemon::observe
