// One rank of a collectived job under collective-bench. The launcher starts
// it with COLLECTIVE_SOCKET, LOCAL_RANK and LOCAL_SIZE set; it connects, runs
// one mode in one placement, checks every result (outside the timed part),
// and writes its per-iteration times to stdout (samples.h).
#pragma once

#include "tests/bench/bench_options.h"

namespace collective::bench {

// The process's exit code; errors are explained on stderr.
int RunClientWorker(const BenchOptions& options);

}  // namespace collective::bench
