// The node groups of a job's process sets that span nodes, as the transport
// among the job's daemons knows them (exec/node_transport.h): the global
// set's group is made as the job forms; every other set with members on
// several nodes gets one of its own when it is created, among its nodes
// only, and loses it when it is removed (transfers still running keep it).
// An MPI world makes communicators (world/set_communicators.h), a Gloo job
// world Gloo contexts (gloo/set_groups.h). Engine thread only; Add may
// block until the set's other nodes add it too, which they do at the same
// point of the decision order.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "daemon/job/process_sets.h"
#include "daemon/job/set_span.h"

namespace collective::daemon::exec {

class SetGroups {
 public:
  virtual ~SetGroups() = default;

  // For a set with members here and on other nodes: its span and group.
  // Nothing for other sets.
  virtual absl::Status Add(const job::ProcessSet& set) = 0;
  virtual void Remove(int32_t id) = 0;
  // The span of a set that spans nodes and has members here; null otherwise.
  virtual std::shared_ptr<const job::SetSpan> Find(int32_t id) const = 0;
};

}  // namespace collective::daemon::exec
