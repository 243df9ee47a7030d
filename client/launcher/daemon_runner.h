// The job's daemon: a private collectived that the launcher starts, waits
// for and stops, or a check that a configured one listens.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/launcher/child_process.h"
#include "client/launcher/poll_set.h"
#include "client/launcher/prefixed_stream.h"
#include "client/launcher/rank_environment.h"
#include "client/launcher/signal_watcher.h"
#include "client/launcher/unique_fd.h"

namespace collective::launcher {

struct PrivateDaemonOptions {
  // The collectived binary; empty: the one next to collectiverun, else on PATH.
  std::string binary;
  // Extra flags, after --socket.
  std::vector<std::string> args;
  // Off: the daemon logs warnings and errors only (COLLECTIVED_LOG_LEVEL=warn,
  // unless the environment or `args` say otherwise).
  bool verbose = false;
};

class PrivateDaemon {
 public:
  // Makes a fresh 0700 directory (under $TMPDIR when the socket path fits,
  // else /tmp), starts collectived on a socket in it, in a process group of
  // its own, and waits until the daemon reports that it serves: READY=1 on
  // the sd_notify socket it is given, the readiness protocol it already
  // speaks to systemd, so there is nothing to poll. Its output appears on
  // stderr as "[collectived] ..." lines. Fails if it exits first (why is in
  // its output), takes longer than 30 s, or a forwarded signal arrives
  // (CANCELLED; the signal stays pending on `signals`).
  static absl::StatusOr<std::unique_ptr<PrivateDaemon>> Start(const PrivateDaemonOptions& options,
                                                              const Environment& environment,
                                                              const SignalWatcher& signals);
  ~PrivateDaemon();

  const std::string& socket() const { return socket_; }
  pid_t pid() const { return process_->pid(); }

  // Adds to `set` the daemon's output and, while it runs, its exit, which
  // calls `on_exit` with its wait status.
  void Watch(PollSet& set, const std::function<void(int)>& on_exit);

  // SIGTERM, up to 10 s for the daemon to drain and exit (its output still
  // copied), then SIGKILL. Removes its directory, and the shared memory
  // named for its socket if it did not exit cleanly. Runs once.
  void Stop();

 private:
  PrivateDaemon() = default;
  absl::Status AwaitReady(const SignalWatcher& signals);
  void RemoveLeftovers() const;

  std::string directory_;
  std::string socket_;
  UniqueFd notify_;
  std::optional<ChildProcess> process_;
  std::optional<PrefixedStream> output_;
  bool stopped_ = false;
};

// OK when something accepts connections on `socket` (a configured daemon):
// checked once, before the ranks start, so that a wrong path fails here and
// not as one error per rank.
absl::Status CheckDaemonListening(const std::string& socket);

}  // namespace collective::launcher
