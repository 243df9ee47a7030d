// The seam between the executor and the daemons of other nodes: what a
// collective whose process set spans nodes asks of the transport among the
// daemons (world/mpi_transport.h carries it over MPI; unit tests use an
// in-process fake), and the stages such a collective runs as.
//
// A collective across nodes runs as stages. Each stage is this node's part
// of the work (copies and reductions from the clients' arenas into the
// result slot, on the thread pool), then the transfers that combine it with
// the other nodes' parts, then the work on what arrived (the final scale of
// a reduction). The local work of one stage overlaps the transfers of the
// one before it: a large allreduce is cut into chunks and pipelined that
// way. Every node of a set plans the same stages and transfers, in the same
// order, from the same decisions, so the transport's calls pair up.
//
// Point-to-point messages between ranks of two nodes move their bytes here
// too (StartSend/StartReceive), outside any stage.
//
// Transfers are started and tested by the engine thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/v1/types.pb.h"
#include "daemon/exec/ops/work_list.h"
#include "daemon/job/set_span.h"

namespace collective::daemon::exec {

// A transfer in flight among a set's nodes. Destroying one that has not
// completed abandons it: the transport keeps what it still needs (the job
// failed, and the world that ran it is broken).
class PendingTransfer {
 public:
  virtual ~PendingTransfer() = default;
  // True once complete (and on every later call); an error when the
  // transport failed.
  virtual absl::StatusOr<bool> Test() = 0;
};
using Pending = std::unique_ptr<PendingTransfer>;

// Blocks of rows for the exchange of an alltoall: where they lie (an
// absolute address) and how many rows.
struct RowBlock {
  const std::byte* address = nullptr;
  uint64_t rows = 0;
};

// Nonblocking transfers among the nodes of `span.group`, every node at the
// same point of the same decision order. Element reductions use this
// daemon's kernels (exec/reduce_kernels.h), so that combining nodes follows
// exactly the rules of the local reduction.
class NodeTransport {
 public:
  virtual ~NodeTransport() = default;

  // data[i] = op over the nodes of their data[i], in place. `op` is SUM (also
  // for AVERAGE: the caller divides), MIN, MAX or PRODUCT.
  virtual absl::StatusOr<Pending> StartAllreduce(const job::SetSpan& span, void* data,
                                                 uint64_t count, v1::DataType dtype,
                                                 v1::ReduceOp op) = 0;
  // data = op over the nodes of their data, into the data of the node at
  // place `root` only (the others' is left as it was): a reduce's
  // combination, which sends each node's part once rather than to every
  // node.
  virtual absl::StatusOr<Pending> StartReduce(const job::SetSpan& span, void* data, uint64_t count,
                                              v1::DataType dtype, v1::ReduceOp op, int root) = 0;
  // The reduction over the nodes of `data` (every node's whole partial
  // result), of which the node at place i keeps `counts[i]` elements, the
  // i-th block, at the start of its `data`.
  virtual absl::StatusOr<Pending> StartReduceScatter(const job::SetSpan& span, void* data,
                                                     const std::vector<uint64_t>& counts,
                                                     v1::DataType dtype, v1::ReduceOp op) = 0;
  // Every node's block of rows, in node order, in place: node i's `rows[i]`
  // rows of `row_bytes` lie at row `displs[i]` of `data`.
  virtual absl::StatusOr<Pending> StartAllgather(const job::SetSpan& span, void* data,
                                                 uint64_t row_bytes,
                                                 const std::vector<uint64_t>& rows,
                                                 const std::vector<uint64_t>& displs) = 0;
  // As StartAllgather, into the data of the node at place `root` only (a
  // gather: each node's block crosses the network once).
  virtual absl::StatusOr<Pending> StartGather(const job::SetSpan& span, void* data,
                                              uint64_t row_bytes, const std::vector<uint64_t>& rows,
                                              const std::vector<uint64_t>& displs, int root) = 0;
  // The `bytes` at `data` of the node at place `root`, to every node's `data`.
  virtual absl::StatusOr<Pending> StartBroadcast(const job::SetSpan& span, void* data,
                                                 uint64_t bytes, int root) = 0;
  // Node i's `send[j]` blocks go to node j, which places them, in the same
  // order, at its `receive[i]` blocks.
  virtual absl::StatusOr<Pending> StartExchange(
      const job::SetSpan& span, uint64_t row_bytes, const std::vector<std::vector<RowBlock>>& send,
      const std::vector<std::vector<RowBlock>>& receive) = 0;
  // A point-to-point message's bytes, between this node and the node at
  // place `peer` of the span: `tag` tells apart the messages in flight
  // between the two, and the bytes travel in pieces of at most
  // `chunk_bytes`, received in the order sent.
  virtual absl::StatusOr<Pending> StartSend(const job::SetSpan& span, int peer, const void* data,
                                            uint64_t bytes, int tag, uint64_t chunk_bytes) = 0;
  virtual absl::StatusOr<Pending> StartReceive(const job::SetSpan& span, int peer, void* data,
                                               uint64_t bytes, int tag, uint64_t chunk_bytes) = 0;
};

// Starts one planned transfer.
using TransferStart = std::function<absl::StatusOr<Pending>(NodeTransport& transport)>;

struct CrossNodeStage {
  explicit CrossNodeStage(const std::byte* zeros) : before(zeros), after(zeros) {}

  ops::WorkList before;
  std::vector<TransferStart> transfers;
  ops::WorkList after;
  // Bytes this node sends and receives, for status.
  uint64_t bytes = 0;
  // For error messages: the tensor the stage belongs to.
  std::string tensor;
};

}  // namespace collective::daemon::exec
