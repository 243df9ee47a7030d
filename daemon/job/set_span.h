// How a process set lies on the nodes of a job, and the handle the transport
// among the daemons gives those nodes. Plain data, built once per set and
// shared (read-only) by the tensors of the set and the transfers running for
// them; any thread may read it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/job/node_layout.h"
#include "daemon/job/process_sets.h"

namespace collective::daemon::job {

// What the transport among the daemons (world/: an MPI communicator) knows a
// set's nodes by. Only the transport that made it looks inside.
class NodeGroup {
 public:
  virtual ~NodeGroup() = default;
};

// Set ranks of one node are contiguous (global ranks are node offset + local
// rank, and a set counts its ranks in ascending global order), so a node
// holds set ranks [first, first + count).
struct SetSpan {
  std::shared_ptr<const NodeGroup> group;  // the set's nodes, in node order
  int32_t index = 0;                       // this node's place in the group
  std::vector<int32_t> nodes;              // by place: the node
  std::vector<int32_t> first;              // by place: its first set rank
  std::vector<int32_t> count;              // by place: how many set ranks it holds

  int32_t size() const { return static_cast<int32_t>(nodes.size()); }
  // The place of the node holding set rank `set_rank`.
  int32_t IndexOf(int32_t set_rank) const;
};

// How `set` lies on the nodes of `layout` (no group yet); index is -1 when
// the set has no member on this node.
std::unique_ptr<SetSpan> SpanOf(const ProcessSet& set, const NodeLayout& layout);

}  // namespace collective::daemon::job
