// The collectived a benchmark run talks to: a private one, started from next
// to this executable on a socket in a fresh temporary directory and stopped
// with SIGTERM at the end, or one already running (--socket).
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
#include "tests/common/subprocess.h"

namespace collective::bench {

class DaemonLauncher {
 public:
  // Starts `binary --socket <fresh> flags...` and waits until it serves (or
  // one of `interrupts` arrives).
  static absl::StatusOr<std::unique_ptr<DaemonLauncher>> StartPrivate(
      const std::string& binary, const std::vector<std::string>& flags, absl::Duration timeout,
      Interrupts& interrupts);
  // A daemon someone else runs; fails unless it serves within `timeout`.
  static absl::StatusOr<std::unique_ptr<DaemonLauncher>> UseRunning(const std::string& socket,
                                                                    absl::Duration timeout);

  // A private daemon still running is killed; its directory is removed.
  ~DaemonLauncher();
  DaemonLauncher(const DaemonLauncher&) = delete;
  DaemonLauncher& operator=(const DaemonLauncher&) = delete;

  const std::string& socket() const { return socket_; }
  // The private daemon's pid, or -1 for one that runs on its own.
  pid_t pid() const { return process_ ? process_->pid() : -1; }
  // Why a private daemon is gone, with its log; empty while it runs.
  std::string ExitDescription();

  // SIGTERM, then an error unless the private daemon exits 0 within 20 s.
  absl::Status Stop();

 private:
  DaemonLauncher() = default;

  std::string directory_;
  std::string socket_;
  std::unique_ptr<testing::Subprocess> process_;
};

}  // namespace collective::bench
