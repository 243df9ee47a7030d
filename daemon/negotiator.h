// Global negotiation across nodes, as in Horovod: node 0 coordinates. Each
// node announces the tensors that all its local members of the process set
// have submitted; once every node with members of the set has announced a
// tensor, node 0 checks that all ranks agree and sends every node the same
// decision — run, or fail with the mismatch — in one global order, which
// every node follows, so that their MPI transfers pair up.
//
// Event-driven: announcements and decisions are point-to-point messages on
// the world's control communicator, sent when something becomes ready and
// looked for (MPI_Iprobe) on each engine cycle; nothing runs when idle.
// Engine thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/v1/negotiation.pb.h"
#include "daemon/coordinator.h"
#include "daemon/node_layout.h"
#include "daemon/process_sets.h"
#include "daemon/world.h"

namespace collective::daemon {

// The agreement check of node 0, given every rank's request: OK or the error
// every rank receives. (The engine passes CheckAgreement and the op's
// Check.)
using GlobalCheck = absl::Status (*)(const ReadyTensor& everyone);

class Negotiator {
 public:
  Negotiator(const World& world, NodeLayout layout, GlobalCheck check);
  ~Negotiator();
  Negotiator(const Negotiator&) = delete;
  Negotiator& operator=(const Negotiator&) = delete;

  // A tensor ready on this node, for a set of `set` that spans nodes.
  void Announce(const ReadyTensor& tensor, const ProcessSet& set);

  // Sends what was announced since the last call, takes in what the other
  // nodes sent, and returns the decisions this node must now carry out, in
  // order and in the batches node 0 sent them in (every node fuses within a
  // batch alike, so that their transfers pair up). An MPI error is returned
  // as is: the world is then broken.
  absl::StatusOr<std::vector<v1::Decisions>> Exchange(const ProcessSetTable& sets);

  // Announced tensors not yet decided (the engine keeps polling for them).
  bool waiting() const { return undecided_ > 0 || !sends_.empty(); }

 private:
  // Node 0's view of one tensor being negotiated.
  struct Pending {
    std::vector<v1::RankRequest> ranks;
    int32_t nodes_announced = 0;
  };

  absl::Status Send(int to, int tag, const google::protobuf::Message& message);
  absl::Status FinishSends();
  // Messages with `tag` that have arrived; appended to `out` as (from, bytes).
  absl::Status Receive(int tag, std::vector<std::pair<int, std::string>>& out);
  // Node 0: a node's announcement.
  void Collect(const v1::NodeTensor& tensor, const ProcessSetTable& sets);
  int32_t NodesOf(const ProcessSet& set) const;

  const World& world_;
  const NodeLayout layout_;
  const GlobalCheck check_;
  v1::NodeReady outgoing_;  // announced since the last Exchange
  int64_t undecided_ = 0;   // this node's announced tensors awaiting a decision
  std::map<std::pair<int32_t, std::string>, Pending> table_;  // node 0
  v1::Decisions decided_;                                     // node 0, to send

  struct InFlight {
    std::unique_ptr<std::string> bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::deque<InFlight> sends_;
};

}  // namespace collective::daemon
