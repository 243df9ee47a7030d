// Several collectived started by a real `mpirun`, one per stand-in node, each
// on its own socket directory: the multi-node tests' world on one machine.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/common/subprocess.h"

namespace collective::testing {

class MpiDaemons {
 public:
  struct Options {
    int nodes = 2;
    // Open MPI's byte transfer layers: "tcp,self" (as across machines) or
    // "vader,self" (shared memory).
    std::string btl = "tcp,self";
    std::vector<std::string> daemon_flags;
    // mpirun --enable-recovery: a daemon that dies does not take the others
    // down with it, so that they report it themselves.
    bool recovery = false;
  };

  // Runs mpirun and waits until every daemon answers.
  static absl::StatusOr<std::unique_ptr<MpiDaemons>> Start(const Options& options);
  ~MpiDaemons();  // stops mpirun and removes the directory

  int nodes() const { return static_cast<int>(sockets_.size()); }
  const std::string& socket(int node) const { return sockets_[node]; }
  Subprocess& mpirun() { return *mpirun_; }

  // Starts one worker per local rank on every node: `local_sizes[n]` ranks of
  // `worker` with `args` against node n's daemon, in node order. Workers get
  // every node's socket in COLLECTIVE_TEST_SOCKETS (to follow the whole job's
  // state, which no one daemon holds), their node in COLLECTIVE_TEST_NODE,
  // the local sizes in COLLECTIVE_TEST_LOCAL_SIZES, and the job's size in
  // WORLD_SIZE, as launchers set it.
  absl::StatusOr<std::vector<Subprocess>> StartWorkers(const std::string& worker,
                                                       const std::vector<int>& local_sizes,
                                                       const std::vector<std::string>& args) const;

  // SIGTERM to every daemon; mpirun's exit status once they all stopped.
  std::optional<int> Stop();
  // Node n's daemon's pid (from its Status), or an error if it does not
  // answer.
  absl::StatusOr<pid_t> DaemonPid(int node) const;
  // Waits for mpirun to exit (every daemon gone).
  std::optional<int> Wait(absl::Duration timeout) { return mpirun_->Wait(timeout); }
  const std::string& directory() const { return directory_; }

 private:
  MpiDaemons() = default;

  std::string directory_;
  std::vector<std::string> sockets_;
  std::unique_ptr<Subprocess> mpirun_;
};

}  // namespace collective::testing
