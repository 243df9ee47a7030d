// One rank of the MPI baseline under mpirun: the same workloads as the client
// workers, each tensor reduced with a plain in-place MPI_Allreduce (per
// tensor for the ResNet step, as Horovod without fusion does), or the sweep's
// other collective: MPI_Allgather, MPI_Bcast (root 0, in place),
// MPI_Alltoall (even split) or MPI_Reduce_scatter_block. Rank 0 writes the
// slowest rank's per-iteration times to stdout (samples.h).
#pragma once

#include "tests/bench/bench_options.h"

namespace collective::bench {

// The process's exit code; errors are explained on stderr.
int RunMpiWorker(const BenchOptions& options);

}  // namespace collective::bench
