// The job's daemons: a private collectived that the launcher starts, waits
// for and stops (or, for an elastic job spread over stand-in nodes, one per
// node as an MPI world that mpirun starts), or a check that a configured one
// listens.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
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
  // One daemon per socket, in node order; empty: one on a socket in the
  // private directory. Several form an MPI world of stand-in nodes on this
  // machine: mpirun starts one collectived per socket, node i (MPI rank i)
  // on sockets[i].
  std::vector<std::string> sockets;
  // Without `sockets`: how many daemons, on sockets node<i>.sock in the
  // private directory when several.
  int nodes = 1;
  // With `sockets`, for a world that may span machines: each node's host,
  // empty for this machine, and for one on another machine the
  // NOTIFY_SOCKET its host agent listens on there (the agent relays
  // READY=1 and the daemon's exit: RemoteReady, RemoteExited). Empty: all
  // on this machine.
  std::vector<std::string> hosts;
  std::vector<std::string> remote_notify;
  // With another machine among `hosts`: mpirun and its flags (machines_job.h's
  // MpirunForMachines), and the -x exports of each app context.
  std::vector<std::string> mpirun;
  std::vector<std::string> exports;
};

class PrivateDaemon {
 public:
  // Makes a fresh 0700 directory (under $TMPDIR when the socket path fits,
  // else /tmp), starts collectived on a socket in it (or on each of
  // `options.sockets`, under mpirun), in a process group of its own, and
  // waits until every daemon reports that it serves: READY=1 on the
  // sd_notify socket it is given, the readiness protocol it already speaks
  // to systemd, so there is nothing to poll. Their output appears on stderr
  // as "[collectived] ..." lines. Fails if the daemon (or mpirun) exits
  // first (why is in its output), takes longer than 30 s, or a forwarded
  // signal arrives (CANCELLED; the signal stays pending on `signals`).
  static absl::StatusOr<std::unique_ptr<PrivateDaemon>> Start(const PrivateDaemonOptions& options,
                                                              const Environment& environment,
                                                              const SignalWatcher& signals);
  // Start without the wait, for a caller that goes on meanwhile: the
  // daemons are started; the caller adds WatchStart and Watch to its poll
  // loop until ready() (then calls Serve) or they exit, or the start
  // deadline passes (StartFailed says why).
  static absl::StatusOr<std::unique_ptr<PrivateDaemon>> Launch(const PrivateDaemonOptions& options,
                                                               const Environment& environment);
  void WatchStart(PollSet& set);
  // Every daemon reported ready.
  bool ready() const;
  absl::Time start_deadline() const { return start_deadline_; }
  // Why the start failed: the daemons (or mpirun) exited with
  // `exit_status`, or, without one, the start deadline passed.
  absl::Status StartFailed(std::optional<int> exit_status);
  // Once ready: watches each node's daemon (WatchNodes) from now on.
  absl::Status Serve();
  ~PrivateDaemon();

  // Node 0's socket (the only one, unless several were asked for).
  const std::string& socket() const { return sockets_.front(); }
  const std::vector<std::string>& sockets() const { return sockets_; }
  // collectived's pid, or mpirun's for several.
  pid_t pid() const { return process_->pid(); }
  // "collectived (pid 12)" / "the 3 collectived of mpirun (pid 12)".
  std::string Describe() const;

  // The host agent of another machine says that the daemon on `socket`
  // there serves, as `pid` (its readiness), or that it exited (a node's
  // exit, as WatchNodes reports one of this machine).
  void RemoteReady(const std::string& socket, pid_t pid);
  void RemoteExited(const std::string& socket, pid_t pid);

  // Adds to `set` the daemon's output and, while it runs, its exit, which
  // calls `on_exit` with its wait status.
  void Watch(PollSet& set, const std::function<void(int)>& on_exit);

  // With several daemons: adds to `set` the exit of each node's daemon that
  // still runs, which calls `on_node_exit` with its node (the others keep
  // running).
  void WatchNodes(PollSet& set, const std::function<void(int)>& on_node_exit);

  // SIGTERM (to each daemon under mpirun, which then exits with them), up
  // to 10 s for them to drain and exit (their output still copied), then
  // SIGKILL. Removes the private directory, and the shared memory a daemon
  // that died left, named for its socket. Runs once.
  void Stop();
  // Stop in halves, for a caller that goes on meanwhile: RequestStop sends
  // the SIGTERM; the caller watches the exit (Watch), calls
  // KillIfPastStopDeadline when it wakes, and Stop once exited().
  // `world_lost` (or a node's daemon seen to exit): a node of the world is
  // gone, and the others are told so (SIGUSR1), so that they do not wait
  // for its word before they exit.
  void RequestStop(bool world_lost = false);
  // When it is killed unless it exited; nullopt before RequestStop and
  // once killed (then only its exit is to be waited for).
  std::optional<absl::Time> stop_deadline() const {
    return killed_ ? std::nullopt : stop_deadline_;
  }
  void KillIfPastStopDeadline(absl::Time now);
  bool exited() const;

 private:
  PrivateDaemon() = default;
  // Several daemons, or one on another machine: mpirun starts them.
  bool under_mpirun() const;
  absl::Status AwaitReady(const SignalWatcher& signals);

  std::string directory_;
  std::vector<std::string> sockets_;
  std::string notify_path_;
  UniqueFd notify_;
  absl::Time start_deadline_;
  std::optional<absl::Time> stop_deadline_;  // since RequestStop
  bool killed_ = false;
  // Each node's daemon's pid, from the credentials of its READY=1, and,
  // with several, a pidfd per node, reset once that daemon exited.
  std::vector<pid_t> daemon_pids_;
  std::vector<UniqueFd> node_exits_;
  // Per node: whether it runs on another machine (its pid is there; its
  // node_exits_ entry is an eventfd that RemoteExited makes readable).
  std::vector<bool> remote_;
  // A node's daemon exited before Stop, or the caller said the world lost
  // a node.
  bool node_lost_ = false;
  std::optional<ChildProcess> process_;
  std::optional<PrefixedStream> output_;
  bool stopped_ = false;
};

// The collectived binary to start: `chosen` (--daemon) if given, else the
// one next to collectiverun, else whatever PATH finds.
std::string CollectivedBinary(const std::string& chosen);
// collectiverun's own path (which other machines share), else its name.
std::string CollectiverunBinary();

// A datagram socket at `path` for sd_notify(3) messages (the readiness
// protocol collectived speaks to systemd), each carrying its sender's
// credentials (SO_PASSCRED); non-blocking.
absl::StatusOr<UniqueFd> BindNotifySocket(const std::string& path);
// A collectived said READY=1: its pid, and the socket its STATUS says it
// serves ("idle, serving <socket>"; empty when it says none).
struct ReadyNotice {
  pid_t pid = 0;
  std::string socket;
};
// Reads every pending notification on `fd` (BindNotifySocket's); returns
// those that say READY=1.
std::vector<ReadyNotice> ReadReadyNotices(int fd);

// OK when something accepts connections on `socket` (a configured daemon):
// checked once, before the ranks start, so that a wrong path fails here and
// not as one error per rank.
absl::Status CheckDaemonListening(const std::string& socket);

}  // namespace collective::launcher
