#include "daemon/world/set_communicators.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon::world {
namespace {

// The tag of MPI_Comm_create_group, which runs on the control communicator
// (only point-to-point traffic goes there, none on this tag) so that it
// never meets the data communicator's transfers still in flight.
constexpr int kCreateTag = 100;

}  // namespace

MpiGroup::~MpiGroup() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

MPI_Comm CommOf(const job::SetSpan& span) {
  return static_cast<const MpiGroup&>(*span.group).comm();
}

SetCommunicators::SetCommunicators(const World& world, job::NodeLayout layout)
    : world_(world), layout_(std::move(layout)) {}

absl::StatusOr<std::unique_ptr<SetCommunicators>> SetCommunicators::Create(const World& world,
                                                                           job::NodeLayout layout) {
  std::unique_ptr<SetCommunicators> comms(new SetCommunicators(world, std::move(layout)));
  MPI_Comm job_comm = MPI_COMM_NULL;
  if (absl::Status duplicated =
          MpiStatus(MPI_Comm_dup(world.data(), &job_comm), "MPI_Comm_dup for the job");
      !duplicated.ok()) {
    return duplicated;
  }
  MPI_Comm_set_errhandler(job_comm, MPI_ERRORS_RETURN);
  comms->job_group_ = std::make_shared<MpiGroup>(job_comm);
  return comms;
}

absl::Status SetCommunicators::Add(const job::ProcessSet& set) {
  std::unique_ptr<job::SetSpan> span = job::SpanOf(set, layout_);
  if (span->index < 0 || span->size() < 2) return absl::OkStatus();
  if (set.id == 0) {
    span->group = job_group_;
  } else {
    MPI_Group world_group = MPI_GROUP_NULL;
    MPI_Group group = MPI_GROUP_NULL;
    MPI_Comm_group(world_.control(), &world_group);
    MPI_Group_incl(world_group, span->size(), span->nodes.data(), &group);
    MPI_Comm comm = MPI_COMM_NULL;
    const absl::Status created =
        MpiStatus(MPI_Comm_create_group(world_.control(), group, kCreateTag, &comm),
                  absl::StrCat("MPI_Comm_create_group for process set ", set.id));
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    if (!created.ok()) return created;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    span->group = std::make_shared<MpiGroup>(comm);
    log::Mpi().debug("process set {} spans nodes [{}]: communicator created", set.id,
                     job::RanksString(span->nodes));
  }
  spans_[set.id] = std::move(span);
  return absl::OkStatus();
}

std::shared_ptr<const job::SetSpan> SetCommunicators::Find(int32_t id) const {
  auto it = spans_.find(id);
  return it == spans_.end() ? nullptr : it->second;
}

}  // namespace collective::daemon::world
