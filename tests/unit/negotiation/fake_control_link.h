// Control messages among the daemons of a job, in process, for unit tests
// of node 0's negotiation without MPI: every node's link delivers into the
// others' mailboxes at once, in send order. A node can be cut off (what it
// sends is lost), as a dead daemon's would be. Not thread-safe: the test
// drives every node from its own thread of control, one at a time.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "daemon/negotiation/control_link.h"

namespace collective::daemon::negotiation {

class FakeControlNetwork {
 public:
  explicit FakeControlNetwork(int nodes);

  std::unique_ptr<ControlLink> LinkOf(int node);
  // What `node` sends from now on is lost.
  void CutOff(int node) { cut_off_[static_cast<size_t>(node)] = true; }
  // Messages sent so far, all nodes together.
  int sent() const { return sent_; }

 private:
  friend class FakeControlLink;
  struct Message {
    int from = 0;
    ControlTag tag = ControlTag::kReady;
    std::string bytes;
  };

  const int nodes_;
  std::vector<std::deque<Message>> mailboxes_;  // by receiving node
  std::vector<bool> cut_off_;
  int sent_ = 0;
};

}  // namespace collective::daemon::negotiation
