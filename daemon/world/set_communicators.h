// The MPI communicators of a job's process sets that span nodes: the global
// set gets a duplicate of the world's data communicator, made as the job
// forms, so that transfers a failed job left unfinished never meet the next
// job's; every other set with members on several nodes gets one of its own,
// created among its nodes only when the set is created and freed when it is
// removed (once no transfer uses it). Engine thread only (it calls MPI).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <mpi.h>

#include "absl/status/statusor.h"
#include "daemon/exec/set_groups.h"
#include "daemon/job/node_layout.h"
#include "daemon/job/process_sets.h"
#include "daemon/job/set_span.h"
#include "daemon/world/world.h"

namespace collective::daemon::world {

// The MPI communicator of a set's nodes (job::SetSpan::group), freed with
// the last span or transfer that uses it.
class MpiGroup : public job::NodeGroup {
 public:
  explicit MpiGroup(MPI_Comm comm) : comm_(comm) {}
  ~MpiGroup() override;
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_;
};

// The communicator of a span made by SetCommunicators.
MPI_Comm CommOf(const job::SetSpan& span);

class SetCommunicators : public exec::SetGroups {
 public:
  // The job's communicator for the global set: MPI_Comm_dup, which every
  // node calls as the job forms.
  static absl::StatusOr<std::unique_ptr<SetCommunicators>> Create(const World& world,
                                                                  job::NodeLayout layout);

  // For a set with members here and on other nodes: creates its span and
  // communicator (for a set other than the global one MPI_Comm_create_group,
  // which blocks until the set's other nodes call it too, as they do at the
  // same point of the decision order). Nothing for other sets.
  absl::Status Add(const job::ProcessSet& set) override;
  // Transfers still running keep the span (and communicator) alive.
  void Remove(int32_t id) override { spans_.erase(id); }
  // The span of a set that spans nodes and has members here; null otherwise.
  std::shared_ptr<const job::SetSpan> Find(int32_t id) const override;

 private:
  SetCommunicators(const World& world, job::NodeLayout layout);

  const World& world_;
  const job::NodeLayout layout_;
  std::shared_ptr<const MpiGroup> job_group_;  // the global set's
  std::map<int32_t, std::shared_ptr<const job::SetSpan>> spans_;
};

}  // namespace collective::daemon::world
