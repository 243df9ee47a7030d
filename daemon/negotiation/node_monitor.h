// Whether the other daemons of a job are alive. Node 0 and every other node
// exchange heartbeats (a star, so the traffic grows with the nodes, not with
// their square), and any control message counts as one. A node silent for
// longer than the timeout is taken for dead — its daemon died or hangs, or
// the network between them failed — and the job fails on every node that
// notices, naming it. The negotiator sends the heartbeats (a node's is its
// NodeReady, empty or not, so that it also carries what the node has
// applied); this class keeps the time. Engine thread only.
#pragma once

#include <chrono>
#include <vector>

#include "common/clock.h"
#include "daemon/negotiation/control_link.h"

namespace collective::daemon::negotiation {

class NodeMonitor {
 public:
  NodeMonitor(const ControlLink& link, Clock::duration interval, Clock::duration timeout);

  // Whether a heartbeat is due; Sent() starts the next interval.
  bool Due(Clock::time_point now) const { return now >= next_beat_; }
  void Sent(Clock::time_point now) { next_beat_ = now + interval_; }
  Clock::time_point next_due() const { return next_beat_; }

  // The first watched node silent for longer than the timeout, or -1: node
  // 0 watches every node, every other node watches node 0.
  int Silent(Clock::time_point now) const;
  Clock::duration timeout() const { return timeout_; }

 private:
  const ControlLink& link_;
  const Clock::duration interval_;
  const Clock::duration timeout_;
  Clock::time_point next_beat_;
};

}  // namespace collective::daemon::negotiation
