// The mpirun command line of every MPI launch of a run: the daemons of
// several stand-in nodes and the ranks of the MPI comparison start the same
// way, so that both sides of a comparison use the same transports.
#pragma once

#include <string>
#include <vector>

#include "tests/bench/bench_options.h"

namespace collective::bench {

// `mpirun -np processes ...` up to the program, which the caller appends.
std::vector<std::string> MpirunCommand(const BenchOptions& options, int processes);

}  // namespace collective::bench
