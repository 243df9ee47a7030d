// The daemon: owns every component and wires them together. `main` builds
// one from the configuration; tests start one in-process the same way.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "config/daemon_config.h"
#include "daemon/engine.h"
#include "daemon/metrics_http.h"
#include "daemon/peer_credentials.h"
#include "daemon/service.h"
#include "daemon/unix_listener.h"

namespace collective::daemon {

class Daemon {
 public:
  // Binds the socket (failing if another daemon holds it), removes segments
  // a crashed predecessor left behind, and starts serving. `stop` is how the
  // daemon asks its owner to shut it down (see Engine::StopRequest).
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const config::DaemonConfig& config,
                                                       Engine::StopRequest stop = nullptr);

  // Stops accepting work, fails pending requests with an error that names
  // `reason`, ends every session, removes the socket and every segment.
  void Shutdown(const std::string& reason);

  ~Daemon();

 private:
  Daemon(const config::DaemonConfig& config, uint64_t epoch, std::string metrics_url,
         Engine::StopRequest stop);

  // The metrics text, from the engine thread, for the HTTP listener's thread.
  absl::StatusOr<std::string> FetchMetrics();

  const config::DaemonConfig config_;
  const uint64_t epoch_;
  PeerPolicy policy_;
  Engine engine_;
  CollectiveServiceImpl service_;
  std::unique_ptr<UnixListener> listener_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;  // with metrics_listen
  bool shut_down_ = false;
};

}  // namespace collective::daemon
