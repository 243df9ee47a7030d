// A job's point-to-point messages. A validated send or receive waits for its
// other half: between ranks of this node in the message matcher
// (negotiation/message_matcher.h), whose matched pairs the job run runs
// like any data collective (exec/ops/message.cc); between ranks of
// different nodes in a rendezvous of the two daemons
// (negotiation/remote_messages.h): the receiver's node tells the sender's,
// which answers with the bytes (small messages) or sends them with
// nonblocking MPI straight from the sender's arena (exec/node_transport.h)
// into the receiver's output or result slot. Each daemon completes its own
// half, the send once its bytes are out to a posted receive (MPI's
// synchronous send). Only the two ranks take part: a message waits for
// nobody else and holds up no collective. One per job run; engine thread
// only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/v1/status.pb.h"
#include "config/daemon_config.h"
#include "daemon/engine/across_nodes.h"
#include "daemon/engine/completion.h"
#include "daemon/exec/executor.h"
#include "daemon/exec/node_transport.h"
#include "daemon/job/job.h"
#include "daemon/negotiation/message_matcher.h"
#include "daemon/negotiation/remote_messages.h"

namespace collective::daemon::engine {

class PointToPoint {
 public:
  // What the job run does when messages across nodes move or fail.
  class Run {
   public:
    virtual ~Run() = default;
    // The daemons lost each other (MPI cannot be trusted with this world).
    virtual void LostOtherNodes(const absl::Status& why) = 0;
    // A transfer failed half way: MPI cannot be trusted with this world.
    virtual void AbandonWorld(const absl::Status& why) = 0;
    // Messages moved across nodes: the next ones follow soon.
    virtual void Moved() = 0;
    // Work ended: the job may be finished.
    virtual void MaybeTearDown() = 0;
  };

  PointToPoint(const config::DaemonConfig& config, job::Job& job, Completion& completion,
               exec::Executor& executor, AcrossNodes& across, Run& run);
  ~PointToPoint();

  // The job runs across nodes: messages between nodes meet over `link`,
  // and their bytes move on `transport` (both the job world's).
  void BeginAcrossNodes(negotiation::ControlLink& link, exec::NodeTransport& transport,
                        const job::NodeLayout& layout);

  // A validated send or receive of `set`'s member `client`: it waits for
  // its other half, or fails at once (a peer outside the set, or a CUDA
  // tensor on another node).
  void Add(job::ClientRecord& client, v1::TensorRequest& request, const job::ProcessSet& set);
  // Pairs of this node's ranks that met, to run as data collectives.
  std::vector<negotiation::ReadyTensor> TakeMatched() { return local_.TakeMatched(); }
  // Across nodes: the rendezvous with the other nodes' halves, the messages
  // waiting for result space, and the bytes in flight; true if anything
  // moved. An error: the daemons lost each other.
  absl::StatusOr<bool> Poll();

  // The job failed or ended: every half that waits fails with `why`; those
  // whose bytes move finish (both daemons started them).
  void FailWaiting(const absl::Status& why);
  // MPI is abandoned: the messages in flight fail with `why` too.
  void Abandon(const absl::Status& why);
  // Process set `id` was removed: its halves fail with `why`.
  void RemoveSet(int32_t id, const absl::Status& why);

  // Bytes move across nodes (MPI writes into the job's segments).
  bool moving() const { return !runs_.empty(); }
  // Across nodes, halves wait in the rendezvous.
  bool waiting_across() const { return remote_ != nullptr && !remote_->idle(); }
  // This node's halves that wait, local and across nodes, oldest first.
  std::vector<negotiation::WaitingMessage> Waiting() const;
  void Describe(Clock::time_point now, v1::StatusResponse& response) const;

 private:
  struct MessageRun {
    exec::FusedBatch batch;  // one tensor: the local half
    exec::Executor::Outcome outcome;
    exec::Pending transfer;
    uint64_t bytes = 0;
    // Bytes taken only to be dropped (Drain): no half completes; the set's
    // span keeps its communicator open meanwhile.
    std::unique_ptr<std::vector<std::byte>> drain;
    std::shared_ptr<const job::SetSpan> drain_span;
  };
  // A local send met its receive on another node: its bytes go.
  void StartSend(negotiation::RemoteMessages::MatchedSend send);
  // A local receive's answer came; false while it waits for result space.
  bool StartReceive(negotiation::RemoteMessages::AnsweredReceive& receive);
  // Takes the bytes that follow an answer to a receive that failed or went
  // (into a buffer of the daemon's), so that the sender's daemon finishes.
  void Drain(const negotiation::RemoteMessages::AnsweredReceive& receive);
  // A message across nodes whose bytes moved (`status`: how) completes.
  void Finish(MessageRun run, const absl::Status& status);

  const config::DaemonConfig& config_;
  job::Job& job_;
  Completion& completion_;
  exec::Executor& executor_;
  exec::NodeTransport* transport_ = nullptr;  // the job world's, once it spans nodes
  AcrossNodes& across_;
  Run& run_;

  negotiation::MessageMatcher local_;
  // Across nodes: the rendezvous, the answered receives waiting for result
  // space, and the messages whose bytes are moving.
  std::unique_ptr<negotiation::RemoteMessages> remote_;
  std::deque<negotiation::RemoteMessages::AnsweredReceive> receives_waiting_space_;
  std::deque<MessageRun> runs_;
  // The spans (and so the communicators) of removed sets whose receives,
  // failed with the set, may still be answered with bytes: by receive id,
  // until the bytes are taken or the job ends.
  absl::flat_hash_map<uint64_t, std::shared_ptr<const job::SetSpan>> retired_receive_spans_;
};

}  // namespace collective::daemon::engine
