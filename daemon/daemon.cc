#include "daemon/daemon.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>

#include <sys/resource.h>
#include <unistd.h>

#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "collective/build_config.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/job/secrets.h"
#include "daemon/job/sigbus_guard.h"
#include "daemon/observe/systemd_notify.h"
#include "shm/liveness_mark.h"
#include "shm/segment_names.h"

namespace collective::daemon {
namespace {

// Large enough for a submission of many requests with long names.
constexpr int kMaxMessageBytes = 64 << 20;
// How long a scrape waits for the engine, which answers between two pieces
// of work (milliseconds, unless a huge reduction runs).
constexpr auto kMetricsTimeout = std::chrono::seconds(4);

// Raises the soft descriptor limit to the hard one. Each client holds a
// connection and its segments' descriptors, each user gets a quarter of the
// limit (service::ConnectionsPerUidLimit), and the soft limit a service
// starts with is often 1024 although the hard one (LimitNOFILE= in the unit)
// allows far more. The daemon polls its descriptors (gRPC's epoll, poll),
// never select(), so large numbers are safe.
void RaiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  const rlim_t soft = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    log::Daemon().warn("cannot raise the descriptor limit from {} to {}: {}", soft, limit.rlim_max,
                       std::strerror(errno));
    return;
  }
  log::Daemon().debug("descriptor limit raised from {} to {}", soft, limit.rlim_max);
}

}  // namespace

Daemon::Daemon(const config::DaemonConfig& config, uint64_t epoch, std::string metrics_url,
               gid_t socket_gid, engine::Engine::StopRequest stop)
    : config_(config),
      epoch_(epoch),
      policy_(::geteuid(), config.allowed_uids, config.allowed_gids, job::NameGroup(socket_gid)),
      engine_(config, epoch, std::move(metrics_url), std::move(stop)),
      service_(engine_, policy_) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const config::DaemonConfig& config,
                                                      engine::Engine::StopRequest stop) {
  RaiseDescriptorLimit();
  // The socket first: a second daemon on the same socket (and, likely, the
  // same metrics address) is refused for the socket, which says more.
  auto listener =
      service::UnixListener::Bind({.socket_path = config.socket,
                                   .socket_group = config.socket_group,
                                   .silent_timeout = std::chrono::milliseconds(static_cast<int64_t>(
                                       config.silent_connection_timeout_seconds * 1000))});
  if (!listener.ok()) return listener.status();
  std::unique_ptr<observe::MetricsHttpServer> metrics_http;
  if (!config.metrics_listen.empty()) {
    ASSIGN_OR_RETURN(metrics_http, observe::MetricsHttpServer::Bind(config.metrics_listen));
  }
  auto daemon = std::unique_ptr<Daemon>(
      new Daemon(config, job::NewEpoch(), metrics_http ? metrics_http->url() : std::string(),
                 (*listener)->socket_gid(), std::move(stop)));
  daemon->listener_ = std::move(*listener);
  daemon->metrics_http_ = std::move(metrics_http);

  const shm::SegmentNames names(::geteuid(), config.socket, daemon->epoch_);
  names.RemoveStale();
  if (auto mark = shm::LivenessMark::Hold(names); mark.ok()) {
    daemon->liveness_ = std::move(*mark);
  } else {
    // Not fatal: only the cleanup after a death that nobody else sees fails.
    log::Daemon().warn("{}; if this daemon dies, only the next one on {} removes its segments",
                       mark.status().message(), config.socket);
  }
  shm::RemoveOrphaned(::geteuid());
  job::SigbusGuard::Install();
  if (absl::Status started = daemon->engine_.Start(); !started.ok()) return started;

  grpc::ServerBuilder builder;
  builder.RegisterService(&daemon->service_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  // A connection that spoke HTTP/2 and then started no call (or has none
  // left) goes after the same silence as one that never spoke: gRPC would
  // keep it, and its descriptor, for ever. Clients hold a call while they
  // are in a job, and a gRPC channel reconnects for its next call.
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONNECTION_IDLE_MS,
      static_cast<int>(std::max(1.0, config.silent_connection_timeout_seconds * 1000)));
  daemon->server_ = builder.BuildAndStart();
  if (daemon->server_ == nullptr) {
    daemon->engine_.Shutdown("the gRPC server did not start");
    return absl::InternalError("cannot start the gRPC server");
  }
  daemon->listener_->Start(daemon->server_.get(), &daemon->policy_);
  if (daemon->metrics_http_) {
    daemon->metrics_http_->Start([raw = daemon.get()] { return raw->FetchMetrics(); });
  }
  log::Daemon().info("collectived {} serving {} (pid {})", COLLECTIVE_VERSION, config.socket,
                     ::getpid());
  observe::NotifyReady(observe::DescribeForSystemd(nullptr, config.socket));
  return daemon;
}

void Daemon::Shutdown(const std::string& reason, bool world_lost) {
  if (shut_down_) return;
  shut_down_ = true;
  observe::NotifyStopping(absl::StrCat("stopping: ", reason));
  // Before the engine stops: a scrape in progress still gets its answer.
  if (metrics_http_) metrics_http_->Stop();
  listener_->Stop();
  engine_.Shutdown(reason, world_lost);
  // Every session and registration has been finished by the engine; give
  // in-flight writes a moment to reach the clients.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  listener_.reset();
  log::Daemon().info("collectived stopped");
}

absl::StatusOr<std::string> Daemon::FetchMetrics() {
  // Shared with the reply, which may come after this call gave up waiting.
  auto answer = std::make_shared<std::promise<std::string>>();
  std::future<std::string> text = answer->get_future();
  const bool posted = engine_.Post(engine::MetricsEvent{
      [answer](const v1::MetricsResponse& response) { answer->set_value(response.text()); }});
  if (!posted) return engine_.Refusal();
  if (text.wait_for(kMetricsTimeout) != std::future_status::ready) {
    return absl::DeadlineExceededError("the engine did not render the metrics in time");
  }
  return text.get();
}

Daemon::~Daemon() {
  if (server_ != nullptr) Shutdown("the daemon object was destroyed");
}

}  // namespace collective::daemon
