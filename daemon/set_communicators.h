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
#include "daemon/node_layout.h"
#include "daemon/process_sets.h"
#include "daemon/world.h"

namespace collective::daemon {

// How a set lies on its nodes. Set ranks of one node are contiguous (global
// ranks are node offset + local rank, and a set counts its ranks in
// ascending global order), so a node holds set ranks [first, first + count).
struct SetSpan {
  SetSpan() = default;
  ~SetSpan();  // frees the communicator if it is the set's own
  SetSpan(const SetSpan&) = delete;
  SetSpan& operator=(const SetSpan&) = delete;

  MPI_Comm comm = MPI_COMM_NULL;  // the set's nodes, in node order
  bool owned = false;
  int32_t index = 0;           // this node's rank in comm
  std::vector<int32_t> nodes;  // by comm rank: the node
  std::vector<int32_t> first;  // by comm rank: its first set rank
  std::vector<int32_t> count;  // by comm rank: how many set ranks it holds

  int32_t size() const { return static_cast<int32_t>(nodes.size()); }
  // The comm rank holding set rank `set_rank`.
  int32_t IndexOf(int32_t set_rank) const;
};

// How `set` lies on the nodes of `layout` (comm not set).
std::unique_ptr<SetSpan> SpanOf(const ProcessSet& set, const NodeLayout& layout);

class SetCommunicators {
 public:
  // The job's communicator for the global set: MPI_Comm_dup, which every
  // node calls as the job forms.
  static absl::StatusOr<std::unique_ptr<SetCommunicators>> Create(const World& world,
                                                                  NodeLayout layout);

  // For a set with members here and on other nodes: creates its span and
  // communicator (for a set other than the global one MPI_Comm_create_group,
  // which blocks until the set's other nodes call it too, as they do at the
  // same point of the decision order). Nothing for other sets.
  absl::Status Add(const ProcessSet& set);
  // Transfers still running keep the span (and communicator) alive.
  void Remove(int32_t id) { spans_.erase(id); }
  // The span of a set that spans nodes and has members here; null otherwise.
  std::shared_ptr<const SetSpan> Find(int32_t id) const;

 private:
  SetCommunicators(const World& world, NodeLayout layout);

  const World& world_;
  const NodeLayout layout_;
  MPI_Comm job_comm_ = MPI_COMM_NULL;  // owned by the global set's span
  std::map<int32_t, std::shared_ptr<const SetSpan>> spans_;
};

}  // namespace collective::daemon
