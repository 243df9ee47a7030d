// The launcher role of collective-bench: measures the machine's memcpy
// bandwidth, starts a private collectived (or one per stand-in node under
// mpirun, or uses --socket), and runs every mode as phases of its own
// processes: the MPI baseline first (when comparing), then one client job
// per placement. Each phase's measurements are reported as soon as they are
// in, and only once every rank has checked its results.
#pragma once

#include "tests/bench/bench_options.h"

namespace collective::bench {

// The process's exit code; errors are explained on stderr.
int RunLauncher(const BenchOptions& options);

}  // namespace collective::bench
