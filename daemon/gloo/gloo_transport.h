// The transport among a job's daemons over Gloo: the contexts of the job's
// world (gloo/gloo_group.h: one per set's nodes) carry the transfers the
// executor plans (exec/node_transport.h). One per job world; owned by
// whoever owns that world. A context serves one transport for its life:
// the tags of its collectives count from the transport's first, and its
// goodbyes travel on one slot.
//
// Threads. Gloo's calls block, and the engine thread must not: Start*
// (engine thread only, like the seam's Test) only checks its arguments and
// hands the transfer to a worker thread.
//  - Collectives: one worker per context runs them in start order. Every
//    node starts the same transfers on a context in the same order, so the
//    order pairs them up; each carries a tag (the context's count of
//    collectives started) that keeps its messages apart from any other's.
//  - Point-to-point messages (StartSend/StartReceive): their order differs
//    between nodes, so they bypass the collectives' order: each runs on a
//    thread of its own, on a slot made from its tag (two messages in
//    flight between the same two nodes in the same direction must differ
//    in tag). This Gloo's waits on an unbound buffer cannot poll: a wait
//    that times out, even a zero timeout, fails the whole context.
// A PendingTransfer's Test() only reads what its thread published. So a
// context costs two threads (its worker and its watcher), and a message in
// flight one more.
//
// Failures. A lost connection, a timeout (`timeout` bounds every wait on a
// Gloo call) or any other Gloo exception fails the transfer with a status
// that names the operation and the node ("allreduce across nodes failed:
// the daemon of node 2 closed its connection (Gloo: ...)"), and breaks the
// context: it tells the other nodes which node was lost (so that they all
// name the same cause), closes its connections (so that their transfers
// fail too instead of waiting out their timeout), ends every wait on it
// (even those Gloo itself would leave waiting, gloo_transfers.h), and every
// later transfer on it fails with the same cause. A watcher thread per
// context notices a lost connection at once, even with nothing in flight.
// Other contexts go on.
//
// Memory. A transfer reads and writes the caller's buffers until it
// completes, fails, or Abort returns; destroying its Pending does not stop
// it. So whoever frees the buffers of a transfer that did not complete (a
// failed job's result arena) calls Abort first: it breaks every context,
// which makes the blocked Gloo calls return, and joins every thread. The
// destructor does the same. A resident daemon's world breaks without the
// daemon exiting, so this is the only way its memory becomes free again.
//
// Gloo writes to its sockets without MSG_NOSIGNAL: the process must ignore
// SIGPIPE (daemon/main.cc does), or a node that leaves kills the others.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "daemon/exec/node_transport.h"

namespace gloo {
class Context;  // <gloo/context.h>: this header needs no Gloo
}  // namespace gloo

namespace collective::daemon::gloo {

struct GlooCall;  // gloo/gloo_transfers.h

struct GlooTransportOptions {
  // The longest any Gloo call of a transfer waits for the other nodes (the
  // daemon's node_timeout_seconds); past it the transfer and its context
  // fail.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Called on a worker thread after a transfer completes or fails, so that
  // an engine sleeping on a doorbell looks again; may be empty.
  std::function<void()> wake;
  // By job node, its host, so that errors say "node 1 (host-b)"; nodes
  // without one are named by number alone.
  std::vector<std::string> hosts;
};

class GlooTransport : public exec::NodeTransport {
 public:
  explicit GlooTransport(GlooTransportOptions options);
  // Abort("the job's world was torn down").
  ~GlooTransport() override;

  GlooTransport(const GlooTransport&) = delete;
  GlooTransport& operator=(const GlooTransport&) = delete;

  // Fails every transfer that did not complete with `why` (Aborted), breaks
  // every context it used (their connections close: the other nodes see
  // this node leave), and returns once no thread of the transport touches
  // a caller's buffer any more. Later Start* calls fail. Engine thread (or
  // the owner, once the engine thread is gone).
  void Abort(const std::string& why) { Abort(why, -1); }
  // The same because job node `lost` is gone: the goodbyes name that node
  // rather than this one, so every node names the same cause (-1: none).
  void Abort(const std::string& why, int lost);

  absl::StatusOr<exec::Pending> StartAllreduce(const job::SetSpan& span, void* data, uint64_t count,
                                               v1::DataType dtype, v1::ReduceOp op) override;
  absl::StatusOr<exec::Pending> StartReduce(const job::SetSpan& span, void* data, uint64_t count,
                                            v1::DataType dtype, v1::ReduceOp op, int root) override;
  absl::StatusOr<exec::Pending> StartReduceScatter(const job::SetSpan& span, void* data,
                                                   const std::vector<uint64_t>& counts,
                                                   v1::DataType dtype, v1::ReduceOp op) override;
  absl::StatusOr<exec::Pending> StartAllgather(const job::SetSpan& span, void* data,
                                               uint64_t row_bytes,
                                               const std::vector<uint64_t>& rows,
                                               const std::vector<uint64_t>& displs) override;
  absl::StatusOr<exec::Pending> StartGather(const job::SetSpan& span, void* data,
                                            uint64_t row_bytes, const std::vector<uint64_t>& rows,
                                            const std::vector<uint64_t>& displs, int root) override;
  absl::StatusOr<exec::Pending> StartBroadcast(const job::SetSpan& span, void* data, uint64_t bytes,
                                               int root) override;
  absl::StatusOr<exec::Pending> StartExchange(
      const job::SetSpan& span, uint64_t row_bytes,
      const std::vector<std::vector<exec::RowBlock>>& send,
      const std::vector<std::vector<exec::RowBlock>>& receive) override;
  absl::StatusOr<exec::Pending> StartSend(const job::SetSpan& span, int peer, const void* data,
                                          uint64_t bytes, int tag, uint64_t chunk_bytes) override;
  absl::StatusOr<exec::Pending> StartReceive(const job::SetSpan& span, int peer, void* data,
                                             uint64_t bytes, int tag,
                                             uint64_t chunk_bytes) override;

  // A transfer as a worker runs it: the Gloo calls (gloo_transfers.h),
  // which may throw.
  using Work = std::function<void(const GlooCall& call)>;

 private:
  class Channel;         // a context, its worker, and why it broke
  class MessageThreads;  // the threads of point-to-point messages

  // The channel of `span`'s context, made on first use; drops the channels
  // of contexts that no span and no transfer holds any more.
  absl::StatusOr<std::shared_ptr<Channel>> ChannelOf(const job::SetSpan& span);
  absl::StatusOr<exec::Pending> Collective(const job::SetSpan& span, const char* what, Work work);
  absl::StatusOr<exec::Pending> Message(const job::SetSpan& span, int peer, const char* what,
                                        int tag, Work work);

  const GlooTransportOptions options_;
  // Engine thread only (and Abort).
  std::unordered_map<const ::gloo::Context*, std::shared_ptr<Channel>> channels_;
  std::unique_ptr<MessageThreads> messages_;
  // Not OK once Abort ran: why.
  absl::Status aborted_;
};

}  // namespace collective::daemon::gloo
