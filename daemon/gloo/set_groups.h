// The Gloo groups of a job's process sets that span nodes, as
// world/set_communicators.h makes MPI communicators: the global set gets
// the job world's data context; every other set with members on several
// nodes gets a context among its nodes only, connected through the job's
// rendezvous when the set is created and closed when the last span or
// transfer that uses it lets go.
//
// Creating a set's group blocks until the set's other nodes create it too:
// Add must be called for every set the job creates, on every node, in
// decision order (sets with no member here included, so that the creation
// counts that scope the rendezvous agree), on one thread. The engine calls
// it on its own thread, as it calls the MPI world's MPI_Comm_create_group:
// a set whose other nodes never come holds the engine for at most the
// timeout. Find and Remove may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "daemon/exec/set_groups.h"
#include "daemon/gloo/gloo_group.h"
#include "daemon/gloo/job_world.h"
#include "daemon/job/process_sets.h"
#include "daemon/job/set_span.h"

namespace collective::daemon::gloo {

// A Gloo group of `nodes` (job nodes, in span order; this node among them),
// for the `creation`-th creation of set `set_id` in the job: a new context
// whose rendezvous is scoped "set/<id>/<creation>" in the job's store.
// Blocks until every node of the list has connected, or `deadline`.
absl::StatusOr<std::shared_ptr<const GlooGroup>> ConnectSetGroup(JobWorld& world, int32_t set_id,
                                                                 uint32_t creation,
                                                                 const std::vector<int32_t>& nodes,
                                                                 Clock::time_point deadline);

// The span of `set` on the job's nodes with its group attached: `job_group`
// for the global set (id 0), a group of its own (ConnectSetGroup, blocking)
// for another; null when the set has no member here or lies on this node
// alone.
absl::StatusOr<std::shared_ptr<const job::SetSpan>> SpanWithGroup(
    JobWorld& world, const std::shared_ptr<const GlooGroup>& job_group, const job::ProcessSet& set,
    uint32_t creation, Clock::time_point deadline);

class SetGroups : public exec::SetGroups {
 public:
  // `world` outlives the SetGroups; the global set's group is its data
  // context. `timeout`: how long Add(set) waits for the set's other nodes.
  explicit SetGroups(JobWorld& world, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  SetGroups(const SetGroups&) = delete;
  SetGroups& operator=(const SetGroups&) = delete;

  // For a set with members here and on other nodes: creates its span and
  // group (blocking, see above). Nothing for other sets but counting the
  // creation.
  absl::Status Add(const job::ProcessSet& set, Clock::time_point deadline);
  // The same within the timeout (exec::SetGroups).
  absl::Status Add(const job::ProcessSet& set) override {
    return Add(set, Clock::now() + timeout_);
  }
  // Transfers still running keep the span (and its group) alive.
  void Remove(int32_t id) override;
  // The span of a set that spans nodes and has members here; null otherwise.
  std::shared_ptr<const job::SetSpan> Find(int32_t id) const override;

  const std::shared_ptr<const GlooGroup>& job_group() const { return job_group_; }

 private:
  JobWorld& world_;
  const std::chrono::milliseconds timeout_;
  const std::shared_ptr<const GlooGroup> job_group_;
  std::map<int32_t, uint32_t> creations_;  // by set id; Add's thread only
  mutable std::mutex mutex_;               // guards spans_
  std::map<int32_t, std::shared_ptr<const job::SetSpan>> spans_;
};

}  // namespace collective::daemon::gloo
