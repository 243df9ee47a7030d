// collective-bench: collectived against plain MPI on one node. A size sweep,
// a ResNet-50 gradient step and the latency of a 4-byte allreduce, each with
// client tensors copied in and out or placed in shared memory (zero-copy).
//
// One executable, three roles: the launcher (what people run) starts a
// private daemon and then this executable again as K client workers per
// phase, or as K MPI ranks under mpirun (--compare mpi).
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "tests/bench/bench_options.h"
#include "tests/bench/client_worker.h"
#include "tests/bench/launcher.h"
#include "tests/bench/mpi_worker.h"

int main(int argc, char** argv) {
  CLI::App app{
      "collective-bench: allreduce through collectived (size sweep, ResNet-50 gradient step, "
      "4-byte latency; copy and zero-copy placement), optionally against in-place "
      "MPI_Allreduce"};
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
