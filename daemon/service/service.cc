#include "daemon/service/service.h"

#include <charconv>
#include <memory>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "daemon/service/session_stream.h"

namespace collective::daemon::service {
namespace {

// A Register call parked in the engine until its job forms. gRPC keeps the
// reactor (and the response it writes into) alive until OnDone, which cannot
// run before Finish; Finish happens exactly once, here.
class RegisterReactor;

class GrpcRegisterCall final : public job::RegisterCall {
 public:
  GrpcRegisterCall(uint64_t id, v1::RegisterRequest request, job::PeerCredentials peer,
                   grpc::ServerUnaryReactor* reactor, v1::RegisterResponse* response)
      : id_(id),
        request_(std::move(request)),
        peer_(peer),
        reactor_(reactor),
        response_(response) {}

  uint64_t id() const override { return id_; }
  const v1::RegisterRequest& request() const override { return request_; }
  const job::PeerCredentials& peer() const override { return peer_; }

  void Finish(const absl::Status& status, const v1::RegisterResponse& response) override {
    grpc::ServerUnaryReactor* reactor;
    {
      std::lock_guard lock(mutex_);
      reactor = std::exchange(reactor_, nullptr);
    }
    if (reactor == nullptr) return;
    if (status.ok()) *response_ = response;
    reactor->Finish(ToGrpcStatus(status));
  }

 private:
  const uint64_t id_;
  const v1::RegisterRequest request_;
  const job::PeerCredentials peer_;
  std::mutex mutex_;
  grpc::ServerUnaryReactor* reactor_;
  v1::RegisterResponse* response_;
};

class RegisterReactor final : public grpc::ServerUnaryReactor {
 public:
  RegisterReactor(engine::Engine& engine, uint64_t call_id) : engine_(engine), call_id_(call_id) {}

  void OnCancel() override { engine_.Post(engine::RegisterCancelledEvent{call_id_}); }
  void OnDone() override { delete this; }

 private:
  engine::Engine& engine_;
  const uint64_t call_id_;
};

// A reactor that finishes at once, for refused calls.
template <class Reactor>
Reactor* Refuse(Reactor* reactor, const absl::Status& status) {
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

class RefusedSession final : public grpc::ServerBidiReactor<v1::ClientMessage, v1::DaemonMessage> {
 public:
  explicit RefusedSession(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

// The credentials of the peer of an RPC. The daemon hands every accepted
// socket to gRPC with AddInsecureChannelFromFd, and gRPC names such peers
// "fd:<n>"; the socket stays open for as long as the call is alive.
absl::StatusOr<job::PeerCredentials> PeerOf(const grpc::CallbackServerContext& context) {
  const std::string peer = context.peer();
  int fd = -1;
  if (absl::StartsWith(peer, "fd:")) {
    const char* begin = peer.data() + 3;
    const char* end = peer.data() + peer.size();
    if (std::from_chars(begin, end, fd).ptr != end) fd = -1;
  }
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot identify peer '", peer, "': only local Unix-socket peers are served"));
  }
  return job::ReadPeerCredentials(fd);
}

}  // namespace

absl::StatusOr<job::PeerCredentials> CollectiveServiceImpl::Authorize(
    const grpc::CallbackServerContext& context, const char* rpc) const {
  auto peer = PeerOf(context);
  if (!peer.ok()) {
    log::Rpc().warn("{} refused: {}", rpc, peer.status().message());
    return peer.status();
  }
  if (!policy_.Allows(*peer)) {
    absl::Status refusal = policy_.Refusal(*peer);
    // The accept loop logged the refusal of this peer's connection (at most
    // once a minute per uid); each of its calls would flood the log.
    log::Rpc().debug("{} refused: {}", rpc, refusal.message());
    return refusal;
  }
  return *peer;
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::Register(grpc::CallbackServerContext* context,
                                                          const v1::RegisterRequest* request,
                                                          v1::RegisterResponse* response) {
  auto peer = Authorize(*context, "Register");
  if (!peer.ok()) return Refuse(context->DefaultReactor(), peer.status());
  const uint64_t call_id = next_call_id_.fetch_add(1);
  auto* reactor = new RegisterReactor(engine_, call_id);
  auto call = std::make_shared<GrpcRegisterCall>(call_id, *request, *peer, reactor, response);
  if (!engine_.Post(engine::RegisterEvent{call})) call->Finish(engine_.Refusal(), {});
  return reactor;
}

grpc::ServerBidiReactor<v1::ClientMessage, v1::DaemonMessage>* CollectiveServiceImpl::Session(
    grpc::CallbackServerContext* context) {
  auto peer = Authorize(*context, "Session");
  if (!peer.ok()) return new RefusedSession(peer.status());
  return new SessionReactor(engine_, *peer);
}

template <class Event, class Response, class... Fields>
grpc::ServerUnaryReactor* CollectiveServiceImpl::AskEngine(grpc::CallbackServerContext* context,
                                                           Response* response, const char* rpc,
                                                           Fields... fields) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto peer = Authorize(*context, rpc);
  if (!peer.ok()) return Refuse(reactor, peer.status());
  const bool posted = engine_.Post(Event{[reactor, response](const Response& answer) {
                                           *response = answer;
                                           reactor->Finish(grpc::Status::OK);
                                         },
                                         std::move(fields)...});
  return posted ? reactor : Refuse(reactor, engine_.Refusal());
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::Status(grpc::CallbackServerContext* context,
                                                        const v1::StatusRequest* request,
                                                        v1::StatusResponse* response) {
  return AskEngine<engine::StatusEvent>(context, response, "Status", request->job_id());
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::Health(grpc::CallbackServerContext* context,
                                                        const v1::HealthRequest*,
                                                        v1::HealthResponse* response) {
  return AskEngine<engine::HealthEvent>(context, response, "Health");
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::Metrics(grpc::CallbackServerContext* context,
                                                         const v1::MetricsRequest*,
                                                         v1::MetricsResponse* response) {
  return AskEngine<engine::MetricsEvent>(context, response, "Metrics");
}

grpc::ServerUnaryReactor* CollectiveServiceImpl::Timeline(grpc::CallbackServerContext* context,
                                                          const v1::TimelineRequest* request,
                                                          v1::TimelineResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto peer = Authorize(*context, "Timeline");
  if (!peer.ok()) return Refuse(reactor, peer.status());
  const bool posted = engine_.Post(engine::TimelineEvent{
      *request, *peer, [reactor, response](const absl::StatusOr<v1::TimelineResponse>& answer) {
        if (answer.ok()) *response = *answer;
        reactor->Finish(ToGrpcStatus(answer.status()));
      }});
  return posted ? reactor : Refuse(reactor, engine_.Refusal());
}

}  // namespace collective::daemon::service
