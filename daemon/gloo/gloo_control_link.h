// Point-to-point control messages among the daemons of a job over Gloo: the
// Gloo side of negotiation::ControlLink (negotiation, heartbeats, job
// events), on the job world's control context, which carries nothing else
// so that control messages never queue behind data transfers.
//
// Gloo's transfers are rendezvous (a send moves once the receiver has
// posted a receive), so the link keeps one receiving thread per peer, each
// with a receive always posted on that peer, and Send posts on the
// caller's thread (Gloo's sends do not wait for the peer): a message moves
// as soon as it is sent, with no hop through a thread of the link. A
// completing thread waits for the posted sends in order and frees them.
// Each message travels as a frame: a header (tag, length) with the first
// bytes of the message, and the rest, if any, as a second transfer of
// exactly its size.
//
// A peer's failure: Gloo (this version's TCP transport) tells it to the
// buffers with operations queued on the failed pair, but not to the one
// whose transfer is under way, nor to a send it is writing. So each
// receiving thread waits on two buffers it keeps (first parts, and rests,
// grown to the longest), each with a receive posted once on a slot the
// peer never sends on: that receive stays queued, and the pair's failure
// reaches the buffer whatever else it does. The receiving thread then
// records the peer as gone, which aborts the completing thread's wait on a
// send to it.
//
// The control context belongs to one job world (its rendezvous is scoped
// by job and generation), so a message of an earlier job never arrives
// here and frames carry no generation.
//
// The engine thread calls Send, Receive, Progress and last_heard; they
// never wait on another node (Send posts, taking the pair's lock, which
// Gloo's loop holds while it reads what arrived; Receive takes what the
// threads have queued). The threads report a peer's failure, with its node and
// host, on the engine's next Receive or Progress. A job world's control
// context serves one link, which holds it alone. Destruction stops the
// threads at once (pending waits are aborted; messages not yet written are
// dropped: Flush first) and closes the control connections after what was
// written (the context goes with the link), which the other nodes' links
// then report as this node gone: end the job among the nodes before
// destroying their links.
#pragma once

#include <array>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "absl/status/status.h"
#include "daemon/gloo/job_world.h"
#include "daemon/negotiation/control_link.h"

namespace collective::daemon::gloo {

class GlooControlLink : public negotiation::ControlLink {
 public:
  // Starts the link on `control` (its rank this node, its other ranks the
  // peers), which nothing else may use or hold; `names` by node ("node 2
  // (host b)") name peers in errors.
  GlooControlLink(std::shared_ptr<::gloo::Context> control, std::vector<std::string> names);
  // On the job world's control context, which it takes.
  explicit GlooControlLink(JobWorld& world);
  ~GlooControlLink() override;
  GlooControlLink(const GlooControlLink&) = delete;
  GlooControlLink& operator=(const GlooControlLink&) = delete;

  int node() const override { return node_; }
  int nodes() const override { return nodes_; }

  // Posts the message (a message to this node is delivered at once). Fails
  // when `to` is gone.
  absl::Status Send(int to, negotiation::ControlTag tag,
                    const google::protobuf::Message& message) override;
  // Messages with `tag` that have arrived, appended to `out` in arrival
  // order (per sender, in send order); then the first peer failure, if any.
  absl::Status Receive(negotiation::ControlTag tag, std::vector<Received>& out) override;
  // The first peer failure, if any (the completing thread completes sends).
  absl::Status Progress() override;
  // The node whose loss was the first peer failure, or -1 while none is.
  int first_gone() const;

  // Blocks until every message sent so far has left this node (Gloo wrote
  // it to the connection), a peer is gone, or `deadline`: at the end of a
  // job, before destruction, so that the last messages reach the nodes
  // that are still up. Engine thread.
  absl::Status Flush(Clock::time_point deadline) override;

  // When a message last came from `node`, or when the link was made if none
  // has.
  Clock::time_point last_heard(int node) const override;

 private:
  // A posted message: its destination, frame (header, then message) and
  // the buffers of its one or two transfers over the frame (declared after
  // it: destroying a buffer waits until Gloo's loop no longer reads it).
  struct InFlight {
    int to = 0;
    std::vector<char> frame;
    std::unique_ptr<::gloo::transport::UnboundBuffer> first;
    std::unique_ptr<::gloo::transport::UnboundBuffer> rest;
  };
  void CompleteLoop();
  void ReceiveLoop(int peer);
  // Records that `peer` failed (once per peer; nothing while stopping).
  void Fail(int peer, absl::Status why);
  void Deliver(int from, int tag, std::string bytes);
  // A buffer over `memory` whose pair with `peer` failing fails its waits
  // (see above).
  std::unique_ptr<::gloo::transport::UnboundBuffer> Watched(std::vector<char>& memory, int peer);
  // Waits in `slot` for `buffer`'s receive (or send) from (or to) `peer`;
  // false once the link stops or `peer` is gone. Throws what Gloo throws.
  bool Wait(size_t slot, ::gloo::transport::UnboundBuffer& buffer, int peer, bool send);

  std::shared_ptr<::gloo::Context> control_;
  const std::vector<std::string> names_;
  const int node_;
  const int nodes_;

  mutable std::mutex mutex_;  // guards everything below but the threads
  std::condition_variable posted_;
  std::condition_variable drained_;  // unfinished_ fell, or a peer is gone
  size_t unfinished_ = 0;            // messages posted and not yet written
  bool stopping_ = false;
  std::deque<InFlight> in_flight_;  // in the order posted
  // By wait slot (a peer's receiving thread, then the completing thread): what
  // it waits on now, so that destruction or the peer's failure aborts it.
  struct Waiting {
    ::gloo::transport::UnboundBuffer* buffer = nullptr;
    int peer = -1;
    bool send = false;
  };
  std::vector<Waiting> waiting_;
  // Ends `waiting`'s wait (an abort that comes before the wait begins ends
  // that wait at once). Under mutex_.
  static void Abort(const Waiting& waiting);
  std::array<std::vector<Received>, negotiation::kControlTagEnd> inboxes_;
  std::vector<Clock::time_point> last_heard_;
  std::vector<absl::Status> gone_;  // by node: why it is gone, or OK
  absl::Status first_failure_;
  int first_gone_ = -1;  // the node of first_failure_

  std::vector<std::thread> threads_;  // started last, joined first
};

}  // namespace collective::daemon::gloo
