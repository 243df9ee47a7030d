// The daemon: owns every component and wires them together. `main` builds
// one from the configuration; tests start one in-process the same way.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "config/daemon_config.h"
#include "daemon/engine/engine.h"
#include "daemon/job/peer_credentials.h"
#include "daemon/observe/metrics_http.h"
#include "daemon/service/service.h"
#include "daemon/service/unix_listener.h"
#include "shm/liveness_mark.h"

namespace collective::daemon {

class Daemon {
 public:
  // Binds the socket (failing if another daemon holds it), removes segments
  // a crashed predecessor left behind (on this socket, and those of any dead
  // daemon of this uid whose liveness mark nobody holds), holds its own mark,
  // and starts serving. `stop` is how the
  // daemon asks its owner to shut it down (see Engine::StopRequest).
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const config::DaemonConfig& config,
                                                       engine::Engine::StopRequest stop = nullptr);

  // Stops accepting work, fails pending requests with an error that names
  // `reason`, ends every session, removes the socket and every segment.
  // `world_lost`: a node of the MPI world is gone (see engine::ShutdownEvent).
  void Shutdown(const std::string& reason, bool world_lost = false);

  ~Daemon();

 private:
  Daemon(const config::DaemonConfig& config, uint64_t epoch, std::string metrics_url,
         gid_t socket_gid, engine::Engine::StopRequest stop);

  // The metrics text, from the engine thread, for the HTTP listener's thread.
  absl::StatusOr<std::string> FetchMetrics();

  const config::DaemonConfig config_;
  const uint64_t epoch_;
  // Declared before the engine: removed after the engine's segments.
  std::optional<shm::LivenessMark> liveness_;
  job::PeerPolicy policy_;
  engine::Engine engine_;
  service::CollectiveServiceImpl service_;
  std::unique_ptr<service::UnixListener> listener_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<observe::MetricsHttpServer> metrics_http_;  // with metrics_listen
  bool shut_down_ = false;
};

}  // namespace collective::daemon
