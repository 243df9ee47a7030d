// The daemon's Unix socket: one owner per socket path (a lock file), safe
// permissions, and an accept loop that reads each peer's credentials and
// hands the connection to the gRPC server.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "daemon/job/peer_credentials.h"

namespace collective::daemon::service {

class UnixListener {
 public:
  struct Options {
    std::string socket_path;
    // Group given to the socket file (name or number); empty keeps the
    // daemon's own group.
    std::string socket_group;
  };

  // Takes `<socket>.lock` (failing with a message naming the daemon that
  // holds it), creates the socket directory 0755 if missing (refusing a
  // world-writable one without the sticky bit), removes a stale socket, and
  // listens on a socket file of mode 0660.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Bind(const Options& options);

  ~UnixListener();
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Accepts connections until Stop. Peers that `policy` refuses are logged
  // here and still handed to gRPC, whose handlers answer PERMISSION_DENIED.
  void Start(grpc::Server* server, const job::PeerPolicy* policy);

  // Stops accepting and removes the socket file. The lock is held until
  // destruction, so no second daemon starts while this one winds down.
  void Stop();

 private:
  UnixListener(std::string socket_path, int listen_fd, int lock_fd, int stop_fd);
  void AcceptLoop(grpc::Server* server, const job::PeerPolicy* policy);

  const std::string socket_path_;
  int listen_fd_;
  int lock_fd_;
  int stop_fd_;  // eventfd that ends the accept loop
  std::thread thread_;
  std::atomic<bool> stopped_{false};
};

}  // namespace collective::daemon::service
