// The seam between negotiation across nodes and the transport of its
// messages: point-to-point control messages among the daemons of a job
// (world/control_channel.h carries them over MPI; unit tests use an
// in-process fake). Sends never block and arrivals are polled, so the
// engine never waits on another node. Messages of an earlier job never
// arrive as this job's. Engine thread only.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <google/protobuf/message.h>

#include "absl/status/status.h"
#include "common/clock.h"

namespace collective::daemon::negotiation {

enum class ControlTag : int {
  kReady = 1,      // NodeReady, node -> node 0
  kDecisions = 2,  // Decisions, node 0 -> nodes
  kHeartbeat = 3,  // Heartbeat
  kJobEvent = 4,   // JobEvent, any node -> every other node
  // Point-to-point messages between nodes (remote_messages.h).
  kMessageNotice = 5,  // MessageNotice, the receiver's node -> the sender's
  kMessageReply = 6,   // MessageReply, the sender's node -> the receiver's
  kPeerParts = 7,      // PeerParts, a node -> the other nodes of a set but node 0
};
// Every ControlTag lies in [1, kControlTagEnd).
inline constexpr int kControlTagEnd = static_cast<int>(ControlTag::kPeerParts) + 1;

class ControlLink {
 public:
  struct Received {
    int from = 0;
    std::string bytes;  // the message, without the envelope
  };

  virtual ~ControlLink() = default;

  // This node, and how many nodes the job spans.
  virtual int node() const = 0;
  virtual int nodes() const = 0;

  virtual absl::Status Send(int to, ControlTag tag, const google::protobuf::Message& message) = 0;
  // Messages with `tag` that have arrived, appended to `out` in arrival
  // order: at least every one that arrived before the previous Receive of
  // `tag` returned (a transport may look for all tags at once, once per
  // round of Receives).
  virtual absl::Status Receive(ControlTag tag, std::vector<Received>& out) = 0;
  // Completes the sends the transport has finished with.
  virtual absl::Status Progress() = 0;
  // At the job's end, before the link goes: waits until every message sent
  // so far has left this node, a peer is gone, or `deadline`. A transport
  // whose messages outlive the link (MPI's) has nothing to wait for.
  virtual absl::Status Flush(Clock::time_point /*deadline*/) { return absl::OkStatus(); }

  // When a message last came from `node`, or when the link was made if none
  // has.
  virtual Clock::time_point last_heard(int node) const = 0;
};

}  // namespace collective::daemon::negotiation
