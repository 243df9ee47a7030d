// What the gRPC side (and the GPU's completion callbacks) hand to the engine
// thread. Handlers only parse, check the peer, and post one of these; all job
// state changes on the engine thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "collective/v1/collective.pb.h"
#include "collective/v1/status.pb.h"
#include "daemon/job/peer_credentials.h"
#include "daemon/job/session_link.h"

namespace collective::daemon::engine {

struct RegisterEvent {
  std::shared_ptr<job::RegisterCall> call;
};

// The client gave up on (or died during) a Register call.
struct RegisterCancelledEvent {
  uint64_t call_id = 0;
};

struct ClientMessageEvent {
  std::shared_ptr<job::SessionLink> link;
  job::PeerCredentials peer;
  v1::ClientMessage message;
};

// The client's side of its session ended (it closed it, or died).
struct SessionClosedEvent {
  std::shared_ptr<job::SessionLink> link;
};

struct StatusEvent {
  std::function<void(const v1::StatusResponse&)> reply;
  std::string job_id;  // only this job's report; empty: every job's
};

struct HealthEvent {
  std::function<void(const v1::HealthResponse&)> reply;
};

struct MetricsEvent {
  std::function<void(const v1::MetricsResponse&)> reply;
};

struct TimelineEvent {
  v1::TimelineRequest request;
  job::PeerCredentials peer;  // the timeline file is opened with this identity
  std::function<void(const absl::StatusOr<v1::TimelineResponse>&)> reply;
};

struct ShutdownEvent {
  std::string reason;
  // A node of the MPI world is gone: the world is abandoned at once (MPI
  // left unfinalised), instead of waiting at the end for every node's stop
  // notice, which that node never sends.
  bool world_lost = false;
};

// A batch of CUDA tensors is done on one device (posted from CUDA's
// callback thread).
struct GpuDoneEvent {
  uint64_t batch = 0;
};

using EngineEvent = std::variant<RegisterEvent, RegisterCancelledEvent, ClientMessageEvent,
                                 SessionClosedEvent, StatusEvent, HealthEvent, TimelineEvent,
                                 ShutdownEvent, MetricsEvent, GpuDoneEvent>;

}  // namespace collective::daemon::engine
