// The Gloo calls behind GlooTransport (gloo/gloo_transport.h): each one
// transfer among the nodes of a context, blocking until it completes, and
// throwing Gloo's exceptions (gloo::IoException on a lost connection or a
// timeout, gloo::EnforceNotMet on a misuse) for the caller to turn into a
// status. Run on the transport's worker threads only: never on the engine
// thread.
//
// Every buffer a call waits on is one of its own, registered with the
// call's BufferWaits, because this Gloo (0.5.0, git 2022-05-18) fails the
// pending operations of a connection that breaks but not the receive it
// is reading into nor a send queued after the socket refused it: a wait on
// those would only end at the timeout. So the transfers whose Gloo
// algorithm waits on buffers of its own are built here from unbound
// buffers, each node sending straight to each other node: allreduce (a
// reduce-scatter, then an allgather), reduce, reduce-scatter (Gloo's
// takes no custom reduction either), gather with uneven blocks (Gloo's has
// none), allgather with blocks apart, the exchange of an alltoall (its
// blocks lie anywhere in memory) and point-to-point messages. Gloo's own
// algorithms run where they wait on the caller's buffers only: broadcast
// (binomial tree) and allgatherv (ring, blocks back to back). Reductions
// fold the nodes in rank order with the daemon's kernels
// (exec/reduce_kernels.h), exactly as the local reduction folds ranks.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "collective/v1/types.pb.h"
#include "daemon/exec/node_transport.h"
#include "daemon/exec/reduce_kernels.h"

namespace collective::daemon::gloo {

// The buffers the calls on one context are waiting on, so that breaking
// the context ends every wait (AbortAll), including those Gloo leaves
// waiting. Any thread.
class BufferWaits {
 public:
  void Add(::gloo::transport::UnboundBuffer* buffer);
  void Remove(::gloo::transport::UnboundBuffer* buffer);
  // Ends the waits of every buffer added, now or later: they return false.
  // Call once the context's connections are closed (gloo_failures.h's
  // BreakContext), so that no transfer touches a buffer once its call
  // returned.
  void AbortAll();

 private:
  std::mutex mutex_;
  std::vector<::gloo::transport::UnboundBuffer*> buffers_;
  bool aborted_ = false;
};

// What every call needs: the context, the tag that keeps its messages apart
// from those of the other transfers in flight on the context (every node
// gives the same transfer the same tag), and the timeout of each wait.
struct GlooCall {
  std::shared_ptr<::gloo::Context> context;
  uint32_t tag = 0;
  std::chrono::milliseconds timeout{0};
  BufferWaits* waits = nullptr;  // the context's; outlives the call
};

// data[i] = reduction over the nodes of their data[i], in place.
void Allreduce(const GlooCall& call, void* data, uint64_t count, const exec::ReduceSpec& spec);
// The same, into the data of context rank `root` only; the others' data is
// only read.
void Reduce(const GlooCall& call, void* data, uint64_t count, const exec::ReduceSpec& spec,
            int root);
// The reduction over the nodes of `data`, of which rank i keeps `counts[i]`
// elements (the i-th block) at the start of its `data`.
void ReduceScatter(const GlooCall& call, void* data, const std::vector<uint64_t>& counts,
                   const exec::ReduceSpec& spec);
// Every rank's block of rows, in place: rank i's `rows[i]` rows of
// `row_bytes` at row `displs[i]`.
void Allgather(const GlooCall& call, void* data, uint64_t row_bytes,
               const std::vector<uint64_t>& rows, const std::vector<uint64_t>& displs);
// The same blocks into the data of rank `root` only.
void Gather(const GlooCall& call, void* data, uint64_t row_bytes, const std::vector<uint64_t>& rows,
            const std::vector<uint64_t>& displs, int root);
// Rank `root`'s `bytes` at `data` to every rank's `data`.
void Broadcast(const GlooCall& call, void* data, uint64_t bytes, int root);
// Rank i's send[j] blocks to rank j, which places their rows, in order, at
// its receive[i] blocks (the two sides may cut the rows into blocks
// differently).
void Exchange(const GlooCall& call, uint64_t row_bytes,
              const std::vector<std::vector<exec::RowBlock>>& send,
              const std::vector<std::vector<exec::RowBlock>>& receive);
// A message's bytes to (from) rank `peer`, in pieces of at most
// `chunk_bytes`, on a slot of their own made from `call.tag` (the
// message's tag): outside the order of the collectives, received in the
// order sent.
void Send(const GlooCall& call, int peer, const void* data, uint64_t bytes, uint64_t chunk_bytes);
void Receive(const GlooCall& call, int peer, void* data, uint64_t bytes, uint64_t chunk_bytes);

}  // namespace collective::daemon::gloo
