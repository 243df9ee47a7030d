#include "daemon/daemon.h"

#include <unistd.h>

#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "collective/build_config.h"
#include "common/logging.h"
#include "daemon/secrets.h"
#include "daemon/sigbus_guard.h"
#include "daemon/systemd_notify.h"
#include "shm/segment_names.h"

namespace collective::daemon {
namespace {

// Large enough for a submission of many requests with long names.
constexpr int kMaxMessageBytes = 64 << 20;

}  // namespace

Daemon::Daemon(const config::DaemonConfig& config, uint64_t epoch, Engine::StopRequest stop)
    : config_(config),
      epoch_(epoch),
      policy_(::geteuid(), config.allowed_uids, config.allowed_gids),
      engine_(config, epoch, std::move(stop)),
      service_(engine_, policy_) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const config::DaemonConfig& config,
                                                      Engine::StopRequest stop) {
  auto daemon = std::unique_ptr<Daemon>(new Daemon(config, NewEpoch(), std::move(stop)));
  auto listener = UnixListener::Bind({config.socket, config.socket_group});
  if (!listener.ok()) return listener.status();
  daemon->listener_ = std::move(*listener);

  shm::SegmentNames(::geteuid(), config.socket, daemon->epoch_).RemoveStale();
  SigbusGuard::Install();
  if (absl::Status started = daemon->engine_.Start(); !started.ok()) return started;

  grpc::ServerBuilder builder;
  builder.RegisterService(&daemon->service_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  daemon->server_ = builder.BuildAndStart();
  if (daemon->server_ == nullptr) {
    daemon->engine_.Shutdown("the gRPC server did not start");
    return absl::InternalError("cannot start the gRPC server");
  }
  daemon->listener_->Start(daemon->server_.get(), &daemon->policy_);
  log::Daemon().info("collectived {} serving {} (pid {})", COLLECTIVE_VERSION, config.socket,
                     ::getpid());
  NotifyReady(absl::StrCat("serving ", config.socket));
  return daemon;
}

void Daemon::Shutdown(const std::string& reason) {
  if (shut_down_) return;
  shut_down_ = true;
  NotifyStopping(reason);
  listener_->Stop();
  engine_.Shutdown(reason);
  // Every session and registration has been finished by the engine; give
  // in-flight writes a moment to reach the clients.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  listener_.reset();
  log::Daemon().info("collectived stopped");
}

Daemon::~Daemon() {
  if (server_ != nullptr) Shutdown("the daemon object was destroyed");
}

}  // namespace collective::daemon
