#include "tests/integration/multinode/mpi_daemons.h"

#include <csignal>
#include <filesystem>
#include <numeric>

#include <signal.h>
#include <stdlib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {

absl::StatusOr<std::unique_ptr<MpiDaemons>> MpiDaemons::Start(const Options& options) {
  std::unique_ptr<MpiDaemons> daemons(new MpiDaemons());
  char pattern[] = "/tmp/cld-mpi-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
  daemons->directory_ = pattern;
  for (int node = 0; node < options.nodes; ++node) {
    daemons->sockets_.push_back(absl::StrCat(daemons->directory_, "/node", node, ".sock"));
  }
  // Each rank of mpirun is one node's daemon, on a socket named after its
  // rank (the shell expands it in each rank's own environment).
  std::vector<std::string> daemon_argv = {CollectivedBinary(), "--socket",
                                          daemons->directory_ + "/node$OMPI_COMM_WORLD_RANK.sock"};
  daemon_argv.insert(daemon_argv.end(), options.daemon_flags.begin(), options.daemon_flags.end());
  // --tag-output: each line of a daemon's log says which node wrote it
  // ("[1,0]<stderr>:...").
  std::vector<std::string> argv = {
      "/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "--tag-output", "--mca", "btl",
      options.btl};
  if (options.recovery) argv.push_back("--enable-recovery");
  for (const std::string& arg :
       {std::string("-np"), std::to_string(options.nodes), std::string("/bin/sh"),
        std::string("-c"), "exec " + absl::StrJoin(daemon_argv, " ")}) {
    argv.push_back(arg);
  }
  auto mpirun = Subprocess::Start(argv, {});
  if (!mpirun.ok()) return mpirun.status();
  daemons->mpirun_ = std::make_unique<Subprocess>(std::move(*mpirun));
  for (const std::string& socket : daemons->sockets_) {
    if (absl::Status healthy = AwaitHealthy(socket, absl::Seconds(30)); !healthy.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the daemon on ", socket, " did not come up: ", healthy.message(),
                       "; mpirun's stderr: ", daemons->mpirun_->Stderr()));
    }
  }
  return daemons;
}

MpiDaemons::~MpiDaemons() {
  if (mpirun_) Stop();
  for (const std::string& socket : sockets_) RemoveSegmentsOf(socket);
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

absl::StatusOr<pid_t> MpiDaemons::DaemonPid(int node) const {
  const auto status = QueryStatus(sockets_[node]);
  if (!status.ok()) return status.status();
  return static_cast<pid_t>(status->pid());
}

std::optional<int> MpiDaemons::Stop() {
  // Each daemon is told to stop as a service manager would; mpirun then
  // exits with their status (a SIGTERM to mpirun would kill the job instead).
  bool signalled = false;
  for (const std::string& socket : sockets_) {
    if (const auto status = QueryStatus(socket); status.ok()) {
      ::kill(static_cast<pid_t>(status->pid()), SIGTERM);
      signalled = true;
    }
  }
  if (!signalled) mpirun_->Signal(SIGTERM);
  return mpirun_->Wait(absl::Seconds(30));
}

absl::StatusOr<std::vector<Subprocess>> MpiDaemons::StartWorkers(
    const std::string& worker, const std::vector<int>& local_sizes,
    const std::vector<std::string>& args) const {
  std::vector<Subprocess> workers;
  const int world_size = std::accumulate(local_sizes.begin(), local_sizes.end(), 0);
  for (int node = 0; node < nodes(); ++node) {
    for (int local = 0; local < local_sizes[node]; ++local) {
      std::vector<std::string> argv = {worker};
      argv.insert(argv.end(), args.begin(), args.end());
      auto started =
          Subprocess::Start(argv, {{"COLLECTIVE_SOCKET", sockets_[node]},
                                   {"COLLECTIVE_TEST_SOCKETS", absl::StrJoin(sockets_, ",")},
                                   {"COLLECTIVE_TEST_NODE", std::to_string(node)},
                                   {"COLLECTIVE_TEST_LOCAL_SIZES", absl::StrJoin(local_sizes, ",")},
                                   {"COLLECTIVE_LOCAL_RANK", std::to_string(local)},
                                   {"COLLECTIVE_LOCAL_SIZE", std::to_string(local_sizes[node])},
                                   {"WORLD_SIZE", std::to_string(world_size)}});
      if (!started.ok()) return started.status();
      workers.push_back(std::move(*started));
    }
  }
  return workers;
}

}  // namespace collective::testing
