// The worlds of daemons of a job with a daemon per host, replaced while the
// supervisor's loop goes on: the serving world is told to stop, and once
// it has exited (SIGKILL after its stop timeout) the next one starts, which
// serves once every daemon reported ready. Meanwhile the loop still copies
// the ranks' output, forwards signals and sees workers exit; a daemon that
// hangs on its way out holds up only the next world.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/launcher/daemon_runner.h"
#include "client/launcher/poll_set.h"

namespace collective::launcher {

class DaemonWorlds {
 public:
  // Starts a world on these sockets (node order) without waiting for it
  // (PrivateDaemon::Launch).
  using Launch = std::function<absl::StatusOr<std::unique_ptr<PrivateDaemon>>(
      const std::vector<std::string>& sockets)>;

  // `first`: the world that serves now (the launcher's, which it keeps
  // owning), or null.
  DaemonWorlds(PrivateDaemon* first, Launch launch);
  // Stops every world still running, waiting for each.
  ~DaemonWorlds();

  // The world that serves; null while none does.
  PrivateDaemon* serving() const { return serving_; }
  // A world stops or starts.
  bool busy() const { return !stopping_.empty() || queued_.has_value() || starting_ != nullptr; }

  // Stops the serving world, and starts one on `sockets` once it exited.
  void Replace(std::vector<std::string> sockets);
  // Stops the serving world: none serves until the next Replace.
  // `world_lost`: it lost a node (see PrivateDaemon::RequestStop).
  void StopServing(bool world_lost = false);
  // The job stops: no world starts any more, and one starting stops.
  void Cancel();

  // A host agent relays that the daemon on `socket` of another machine
  // serves as `pid` (for the starting world), or exited (the world whose
  // daemon it was).
  void RemoteReady(const std::string& socket, pid_t pid);
  void RemoteExited(const std::string& socket, pid_t pid);

  // Adds the stopping and starting worlds' output, exits and readiness to
  // `set`, and moves `deadline` up to their timeouts.
  void Watch(PollSet& set, std::optional<absl::Time>& deadline);
  // After the loop woke: kills a world past its stop timeout, finishes
  // stopping one that exited, starts the next. Returns how a start ended:
  // OK once the new world serves, else why it could not.
  std::optional<absl::Status> Advance(absl::Time now);
  // How long the last world that came to serve took to start.
  absl::Duration last_start() const { return last_start_; }

 private:
  struct Stopping {
    PrivateDaemon* daemon;
    std::unique_ptr<PrivateDaemon> owned;  // null for the launcher's
  };
  void StopWorld(PrivateDaemon* daemon, std::unique_ptr<PrivateDaemon> owned,
                 bool world_lost = false);
  std::optional<absl::Status> AdvanceStart(absl::Time now);
  // Stops the stopping worlds that exited for good.
  void FinishStopped();

  Launch launch_;
  PrivateDaemon* serving_;
  std::unique_ptr<PrivateDaemon> owned_serving_;  // serving_, when started here
  std::vector<Stopping> stopping_;
  std::optional<std::vector<std::string>> queued_;  // starts once none stops
  std::unique_ptr<PrivateDaemon> starting_;
  std::optional<int> starting_exit_;  // the starting world's wait status, if it exited
  absl::Time starting_since_;
  absl::Duration last_start_;
};

}  // namespace collective::launcher
