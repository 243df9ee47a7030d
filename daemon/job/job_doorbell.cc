#include "daemon/job/job_doorbell.h"

#include <utility>

#include "common/logging.h"
#include "common/status_macros.h"

namespace collective::daemon::job {

JobDoorbell::JobDoorbell(std::unique_ptr<shm::DoorbellSegment> segment)
    : segment_(std::move(segment)), guard_(segment_->data(), segment_->size()) {}

absl::StatusOr<std::shared_ptr<JobDoorbell>> JobDoorbell::Create(
    const shm::DoorbellSegment::CreateOptions& options) {
  ASSIGN_OR_RETURN(auto segment, shm::DoorbellSegment::Create(options));
  auto doorbell = std::shared_ptr<JobDoorbell>(new JobDoorbell(std::move(segment)));
  if (!doorbell->guard_.guarded()) {
    log::Shm().warn("no SIGBUS guard slot left for doorbell segment {}; truncating it would crash",
                    doorbell->segment_->name());
  }
  return doorbell;
}

}  // namespace collective::daemon::job
