// The daemon's Unix socket: one owner per socket path (a lock file), safe
// permissions, and an accept loop that reads each peer's credentials and
// hands the connection to the gRPC server once it speaks (refused peers too,
// whose calls gRPC answers PERMISSION_DENIED), closing at once those of users
// over their share of descriptors, and those that stay silent past a
// deadline. Bind, Start and Stop run on the
// daemon's main thread; everything else on the accept thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <grpcpp/server.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "daemon/job/peer_credentials.h"
#include "daemon/service/connection_table.h"
#include "daemon/service/silent_connections.h"

namespace collective::daemon::service {

class UnixListener {
 public:
  struct Options {
    std::string socket_path;
    // Group given to the socket file (name or number); empty keeps the
    // daemon's own group.
    std::string socket_group;
    // How long a new connection may stay silent before it is closed
    // (silent_connection_timeout_seconds).
    std::chrono::milliseconds silent_timeout{10000};
  };

  // Takes `<socket>.lock` (failing with a message naming the daemon that
  // holds it), creates the socket directory 0755 if missing (refusing a
  // world-writable one without the sticky bit), removes a stale socket, and
  // listens on a socket file of mode 0660.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Bind(const Options& options);

  ~UnixListener();
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // The group the socket file belongs to: socket_group, or the daemon's.
  gid_t socket_gid() const { return socket_gid_; }

  // Accepts connections until Stop. Refusals of peers that `policy` refuses
  // are logged (at most once a minute per uid) and their calls answered
  // PERMISSION_DENIED; connections that send nothing within the silent
  // timeout are closed when it passes (logged likewise).
  void Start(grpc::Server* server, const job::PeerPolicy* policy);

  // Stops accepting and removes the socket file. The lock is held until
  // destruction, so no second daemon starts while this one winds down.
  void Stop();

 private:
  UnixListener(std::string socket_path, gid_t socket_gid, int listen_fd, int lock_fd, int stop_fd,
               std::chrono::milliseconds silent_timeout);
  void AcceptLoop(grpc::Server* server, const job::PeerPolicy* policy);
  // Accepts one connection, if accept succeeds; false when Stop was called
  // while it backed off.
  bool AcceptOne(const job::PeerPolicy* policy);
  // Holds `fd` until it speaks, or closes it (its uid over its share).
  void Admit(const job::PeerPolicy* policy, int fd);
  // Closes the held connections whose deadline passed, logging them.
  void CloseSilent();
  // Waits up to `delay`; true if Stop was called.
  bool AwaitStopFor(std::chrono::milliseconds delay);
  // Why the accept loop notes a connection (a refused peer's, served; the
  // others closed): each kind is logged (and counted) on its own.
  enum class Closure { kRefused, kTooMany, kSilentTooMany, kSilentTooLong };
  // Whether to log a closure of `uid`'s connection now; else counts it as
  // suppressed.
  bool NoteRefusal(uid_t uid, Closure why = Closure::kRefused);
  // " (N more refused since the last report)" for `uid`, or "" if none; the
  // count starts again.
  std::string TakeSuppressed(uid_t uid, Closure why = Closure::kRefused);

  // Backoff while accept fails for want of descriptors or memory: doubling
  // from the first to the second. Constants, not knobs: they bound how long
  // a pending connection waits after a descriptor frees up (at most the
  // second), and no deployment has reason to trade that against the CPU.
  static constexpr std::chrono::milliseconds kMinAcceptBackoff{5};
  static constexpr std::chrono::milliseconds kMaxAcceptBackoff{200};
  static constexpr std::chrono::seconds kRefusalLogInterval{60};

  struct RefusalLog {
    std::chrono::steady_clock::time_point logged;
    uint64_t suppressed;
  };

  const std::string socket_path_;
  const gid_t socket_gid_;
  int listen_fd_;
  int lock_fd_;
  int stop_fd_;  // eventfd that ends the accept loop
  std::thread thread_;
  std::atomic<bool> stopped_{false};
  const std::chrono::milliseconds silent_timeout_;
  ConnectionTable connections_;
  SilentConnections silent_;
  // Failed accepts since the last success, and the current backoff.
  uint64_t failed_accepts_ = 0;
  std::chrono::milliseconds backoff_{0};
  absl::flat_hash_map<std::pair<uid_t, Closure>, RefusalLog> refusals_;
};

}  // namespace collective::daemon::service
