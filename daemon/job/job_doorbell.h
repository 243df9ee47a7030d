// A job's doorbell segment (shm/doorbell_segment.h) as the daemon holds it:
// the mapping, and the guard that keeps a client that truncates it from
// crashing the daemon. Shared by the job and the engine's doorbell, which
// may still hold it for one loop after the job went. Engine thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "daemon/job/sigbus_guard.h"
#include "shm/doorbell_segment.h"

namespace collective::daemon::job {

class JobDoorbell {
 public:
  static absl::StatusOr<std::shared_ptr<JobDoorbell>> Create(
      const shm::DoorbellSegment::CreateOptions& options);

  // Every client of the job may write it: a value to wait on, not to trust.
  std::atomic<uint32_t>* word() const { return segment_->word(); }
  const shm::DoorbellSegment& segment() const { return *segment_; }
  // A client truncated the segment: the daemon's mapping is now private
  // zeros, and rings no longer reach it.
  bool faulted() const { return guard_.faulted(); }
  // The job went: its name goes at once, though the engine may ring the
  // mapping for one more loop.
  void Unlink() { segment_->Unlink(); }

 private:
  explicit JobDoorbell(std::unique_ptr<shm::DoorbellSegment> segment);

  std::unique_ptr<shm::DoorbellSegment> segment_;
  GuardedRange guard_;
};

}  // namespace collective::daemon::job
