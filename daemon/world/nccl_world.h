// How the daemons of a job agree on an NCCL communicator spanning their
// nodes: each says how many of its devices take part, ranks are numbered
// node by node, and node 0 makes the unique id and sends it to all (or says
// that it could not, so that every node fails alike). MPI, so engine thread
// only; every node calls it at the same point (the first CUDA batch across
// nodes, which node 0's decisions order alike everywhere).
#pragma once

#include <string>

#include <mpi.h>

#include "absl/status/statusor.h"
#include "daemon/gpu/gpu_executor.h"

namespace collective::daemon::world {

absl::StatusOr<gpu::GlobalLayout> ShareLayoutOverMpi(MPI_Comm comm, int local_devices,
                                                     const gpu::NewUniqueId& new_id);

}  // namespace collective::daemon::world
