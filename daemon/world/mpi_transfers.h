// The MPI calls behind MpiTransport (world/mpi_transport.h): nonblocking
// collectives among a set's daemons whose requests, datatypes and argument
// arrays stay in an InFlightMpi until they complete. Engine thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include <mpi.h>

#include "absl/status/status.h"
#include "collective/v1/types.pb.h"
#include "daemon/exec/node_transport.h"

namespace collective::daemon::world {

// What a transfer leaves with MPI until it completes: its requests, the
// datatypes it made (freed then), and the argument arrays MPI may still
// read (a deque: adding one never moves the others).
struct InFlightMpi {
  std::vector<MPI_Request> requests;
  std::vector<MPI_Datatype> types;
  std::deque<std::vector<int>> int_arrays;
  std::deque<std::vector<MPI_Datatype>> type_arrays;
};

// data[i] = op over the set's nodes of their data[i], in place. `op` is SUM
// (also for AVERAGE: the caller divides), MIN, MAX or PRODUCT. MPI moves the
// bytes; this daemon's kernels reduce them (user-defined MPI operations),
// with the same arithmetic as the local reduction.
absl::Status StartAllreduce(MPI_Comm comm, void* data, uint64_t count, v1::DataType dtype,
                            v1::ReduceOp op, InFlightMpi& mpi);

// The same reduction into the `data` of comm rank `root` only (MPI_Ireduce;
// the other nodes' data is only read).
absl::Status StartReduce(MPI_Comm comm, void* data, uint64_t count, v1::DataType dtype,
                         v1::ReduceOp op, int root, InFlightMpi& mpi);

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

// The same blocks into the `data` of comm rank `root` only (MPI_Igatherv).
absl::Status StartGather(MPI_Comm comm, void* data, uint64_t row_bytes,
                         const std::vector<uint64_t>& rows, const std::vector<uint64_t>& displs,
                         int root, InFlightMpi& mpi);

// The root node's `bytes` at `data`, to every node's `data`.
absl::Status StartBroadcast(MPI_Comm comm, void* data, uint64_t bytes, int root, InFlightMpi& mpi);

// Node i's `send[j]` blocks go to node j, which places them, in the same
// order, at its `receive[i]` blocks. One MPI_Ialltoallw: MPI reads the
// clients' arenas and writes the result slot directly.
absl::Status StartExchange(MPI_Comm comm, uint64_t row_bytes,
                           const std::vector<std::vector<exec::RowBlock>>& send,
                           const std::vector<std::vector<exec::RowBlock>>& receive,
                           InFlightMpi& mpi);

// A message's `bytes` to (or from) comm rank `peer`, with `tag`, in pieces
// of at most `chunk_bytes` (MPI_Isend / MPI_Irecv each), which MPI keeps in
// order.
absl::Status StartSend(MPI_Comm comm, int peer, const void* data, uint64_t bytes, int tag,
                       uint64_t chunk_bytes, InFlightMpi& mpi);
absl::Status StartReceive(MPI_Comm comm, int peer, void* data, uint64_t bytes, int tag,
                          uint64_t chunk_bytes, InFlightMpi& mpi);

}  // namespace collective::daemon::world
