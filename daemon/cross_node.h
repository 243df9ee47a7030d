// The MPI half of a collective that spans nodes: the daemons combine their
// nodes' partial results. Engine thread only (it calls MPI).
#pragma once

#include <cstdint>

#include <mpi.h>

#include "absl/status/status.h"
#include "collective/v1/types.pb.h"

namespace collective::daemon {

// data[i] = op over the nodes of `comm` of their data[i], in place. `op` is
// SUM (also for AVERAGE: the caller divides), MIN, MAX or PRODUCT. MPI moves
// the bytes; this daemon's kernels reduce them (user-defined MPI operations),
// with the same arithmetic as the local reduction.
absl::Status AllreduceAcrossNodes(MPI_Comm comm, void* data, uint64_t count, v1::DataType dtype,
                                  v1::ReduceOp op);

}  // namespace collective::daemon
