// The gRPC service (callback API). Handlers check who the peer is, turn the
// call into an engine event, and let the engine answer; they never touch job
// state themselves.
#pragma once

#include <atomic>

#include <grpcpp/grpcpp.h>

#include "collective/v1/collective.grpc.pb.h"
#include "daemon/engine/engine.h"
#include "daemon/job/peer_credentials.h"

namespace collective::daemon::service {

class CollectiveServiceImpl final : public v1::CollectiveService::CallbackService {
 public:
  CollectiveServiceImpl(engine::Engine& engine, const job::PeerPolicy& policy)
      : engine_(engine), policy_(policy) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerBidiReactor<v1::ClientMessage, v1::DaemonMessage>* Session(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::StatusRequest* request,
                                   v1::StatusResponse* response) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const v1::HealthRequest* request,
                                   v1::HealthResponse* response) override;
  grpc::ServerUnaryReactor* Timeline(grpc::CallbackServerContext* context,
                                     const v1::TimelineRequest* request,
                                     v1::TimelineResponse* response) override;
  grpc::ServerUnaryReactor* Metrics(grpc::CallbackServerContext* context,
                                    const v1::MetricsRequest* request,
                                    v1::MetricsResponse* response) override;

 private:
  // The peer's credentials if the policy admits it; else PERMISSION_DENIED,
  // logged.
  absl::StatusOr<job::PeerCredentials> Authorize(const grpc::CallbackServerContext& context,
                                                 const char* rpc) const;

  // A unary call the engine answers: posts an `Event` (its reply, then
  // `fields`) whose reply fills `response` and finishes the call.
  template <class Event, class Response, class... Fields>
  grpc::ServerUnaryReactor* AskEngine(grpc::CallbackServerContext* context, Response* response,
                                      const char* rpc, Fields... fields);

  engine::Engine& engine_;
  const job::PeerPolicy& policy_;
  std::atomic<uint64_t> next_call_id_{1};
};

}  // namespace collective::daemon::service
