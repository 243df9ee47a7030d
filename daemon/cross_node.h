// The MPI half of collectives whose process set spans nodes: nonblocking
// transfers among the set's daemons, started by the engine thread (the only
// one that calls MPI) and completed by polling, so the engine keeps serving
// its clients — and heartbeats — while they run.
//
// A collective across nodes runs as stages. Each stage is this node's part
// of the work (copies and reductions from the clients' arenas into the
// result slot, on the thread pool), then the transfers that combine it with
// the other nodes' parts, then the work on what arrived (the final scale of
// a reduction). The local work of one stage overlaps the transfers of the
// one before it: a large allreduce is cut into chunks and pipelined that
// way. Every node of a set plans the same stages and transfers, in the same
// order, from the same decisions.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include <mpi.h>

#include "absl/status/status.h"
#include "collective/v1/types.pb.h"
#include "daemon/ops/work_list.h"

namespace collective::daemon {

// What a transfer leaves with MPI until it completes: its requests, the
// datatypes it made (freed then), and the argument arrays MPI may still
// read (a deque: adding one never moves the others).
struct InFlightMpi {
  std::vector<MPI_Request> requests;
  std::vector<MPI_Datatype> types;
  std::deque<std::vector<int>> int_arrays;
  std::deque<std::vector<MPI_Datatype>> type_arrays;
};

// Starts one transfer: adds its requests (and any datatypes it made).
using TransferStart = std::function<absl::Status(InFlightMpi& mpi)>;

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

// data[i] = op over the set's nodes of their data[i], in place. `op` is SUM
// (also for AVERAGE: the caller divides), MIN, MAX or PRODUCT. MPI moves the
// bytes; this daemon's kernels reduce them (user-defined MPI operations),
// with the same arithmetic as the local reduction.
absl::Status StartAllreduce(MPI_Comm comm, void* data, uint64_t count, v1::DataType dtype,
                            v1::ReduceOp op, InFlightMpi& mpi);

// The reduction over the set's nodes of `data` (every node's whole partial
// result), of which the node at comm rank i keeps `counts[i]` elements, the
// i-th block, at the start of its `data`.
absl::Status StartReduceScatter(MPI_Comm comm, void* data, const std::vector<uint64_t>& counts,
                                v1::DataType dtype, v1::ReduceOp op, InFlightMpi& mpi);

// Every node's block of rows, in node order, in place: node i's `rows[i]`
// rows of `row_bytes` lie at row `displs[i]` of `data`.
absl::Status StartAllgather(MPI_Comm comm, void* data, uint64_t row_bytes,
                            const std::vector<uint64_t>& rows, const std::vector<uint64_t>& displs,
                            InFlightMpi& mpi);

// The root node's `bytes` at `data`, to every node's `data`.
absl::Status StartBroadcast(MPI_Comm comm, void* data, uint64_t bytes, int root, InFlightMpi& mpi);

// Blocks of rows for the exchange of an alltoall: where they lie (an
// absolute address) and how many rows.
struct RowBlock {
  const std::byte* address = nullptr;
  uint64_t rows = 0;
};

// Node i's `send[j]` blocks go to node j, which places them, in the same
// order, at its `receive[i]` blocks. One MPI_Ialltoallw: MPI reads the
// clients' arenas and writes the result slot directly.
absl::Status StartExchange(MPI_Comm comm, uint64_t row_bytes,
                           const std::vector<std::vector<RowBlock>>& send,
                           const std::vector<std::vector<RowBlock>>& receive, InFlightMpi& mpi);

}  // namespace collective::daemon
