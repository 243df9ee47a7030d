#include "tests/bench/mpirun_command.h"

#include <unistd.h>

namespace collective::bench {

std::vector<std::string> MpirunCommand(const BenchOptions& options, int processes) {
  // ob1 with the chosen byte transfer layers: UCX would busy-poll, and only
  // ob1 yields the core when oversubscribed, as 4 ranks (or 2 daemons beside
  // their clients) on 2 cores are. Unbound, so that the kernel may move the
  // processes to whichever core is free.
  std::vector<std::string> argv = {options.mpirun,    "-np",       std::to_string(processes),
                                   "--oversubscribe", "--bind-to", "none",
                                   "--mca",           "pml",       "ob1",
                                   "--mca",           "btl",       options.btl};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), options.mpirun_args.begin(), options.mpirun_args.end());
  return argv;
}

}  // namespace collective::bench
