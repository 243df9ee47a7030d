// collective-bench: collectived against plain MPI, on one node or on several
// stand-in nodes of this machine. A size sweep of one collective (allreduce,
// allgather, broadcast, alltoall or reducescatter), a ResNet-50 gradient step
// and the latency of a 4-byte allreduce, each with client tensors copied in
// and out or placed in shared memory (zero-copy).
//
// One executable, three roles: the launcher (what people run) starts a
// private daemon (or, for --nodes N, one per node under mpirun) and then this
// executable again as K client workers per node and phase, or as N*K MPI
// ranks under mpirun (--compare mpi).
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "tests/bench/bench_options.h"
#include "tests/bench/client_worker.h"
#include "tests/bench/launcher.h"
#include "tests/bench/mpi_worker.h"

int main(int argc, char** argv) {
  CLI::App app{
      "collective-bench: collectives through collectived (size sweep of allreduce, allgather, "
      "broadcast, alltoall or reducescatter; ResNet-50 gradient step and 4-byte latency of "
      "allreduce; copy and zero-copy placement), optionally against the matching MPI "
      "collective"};
  collective::bench::BenchOptions options;
  collective::bench::OptionParser parser(app, options);
  CLI11_PARSE(app, argc, argv);
  if (const absl::Status status = parser.FinishOptions(); !status.ok()) {
    std::fprintf(stderr, "collective-bench: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  switch (options.role) {
    case collective::bench::Role::kClient:
      return collective::bench::RunClientWorker(options);
    case collective::bench::Role::kMpi:
      return collective::bench::RunMpiWorker(options);
    case collective::bench::Role::kLauncher:
      break;
  }
  return collective::bench::RunLauncher(options);
}
