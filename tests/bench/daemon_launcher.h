// The collectived a benchmark run talks to: a private one, started from next
// to this executable on a socket in a fresh temporary directory and stopped
// with SIGTERM at the end; several, one per stand-in node, started by one
// mpirun, each on its own socket in such a directory; or one already running
// (--socket). Whatever this starts it stops, and a daemon that had to be
// killed leaves no shared-memory segment behind.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/bench/interrupts.h"
#include "tests/bench/pid_fd.h"
#include "tests/common/subprocess.h"

namespace collective::bench {

class DaemonLauncher {
 public:
  // Starts `binary --socket <fresh> flags...` and waits until it serves (or
  // one of `interrupts` arrives).
  static absl::StatusOr<std::unique_ptr<DaemonLauncher>> StartPrivate(
      const std::string& binary, const std::vector<std::string>& flags, absl::Duration timeout,
      Interrupts& interrupts);
  // Starts `mpirun` (a command line up to the program: MpirunCommand) with
  // `nodes` processes, each `binary --socket <fresh>/node<rank>.sock
  // flags...`, and waits until every one serves (or one of `interrupts`
  // arrives).
  static absl::StatusOr<std::unique_ptr<DaemonLauncher>> StartWorld(
      const std::vector<std::string>& mpirun, int nodes, const std::string& binary,
      const std::vector<std::string>& flags, absl::Duration timeout, Interrupts& interrupts);
  // A daemon someone else runs; fails unless it serves within `timeout`.
  static absl::StatusOr<std::unique_ptr<DaemonLauncher>> UseRunning(const std::string& socket,
                                                                    absl::Duration timeout);

  // Daemons still running are killed, their segments and directory removed.
  ~DaemonLauncher();
  DaemonLauncher(const DaemonLauncher&) = delete;
  DaemonLauncher& operator=(const DaemonLauncher&) = delete;

  int nodes() const { return static_cast<int>(sockets_.size()); }
  const std::string& socket(int node) const { return sockets_[static_cast<size_t>(node)]; }
  // The daemons this launcher started, whose exit ends a phase; none for one
  // that runs on its own.
  std::vector<pid_t> pids() const;
  // Why a daemon this launcher started is gone, with the log; empty while
  // they all run.
  std::string ExitDescription();

  // SIGTERM to every daemon, then an error unless each exits 0 (for
  // several: mpirun exits 0) within 20 s.
  absl::Status Stop();

 private:
  DaemonLauncher() = default;
  // A fresh directory for the sockets: /tmp/collective-bench-XXXXXX.
  absl::Status MakeDirectory();
  // Waits until every socket serves, while `process_` runs.
  absl::Status AwaitServing(absl::Duration timeout, Interrupts& interrupts);

  std::string directory_;
  std::vector<std::string> sockets_;
  // The private daemon, or the mpirun of several.
  std::unique_ptr<testing::Subprocess> process_;
  bool by_mpirun_ = false;
  // The daemons mpirun started, by node (they are its children, not ours).
  std::vector<PidFd> world_;
};

}  // namespace collective::bench
