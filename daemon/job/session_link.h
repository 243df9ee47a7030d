// How the engine talks back to a client's session stream and to a pending
// Register call, without knowing about gRPC reactors (and so that tests can
// drive the engine with fakes).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "collective/v1/collective.pb.h"
#include "daemon/job/peer_credentials.h"

namespace collective::daemon::job {

// One client's Session stream, daemon side. Thread-safe.
class SessionLink {
 public:
  virtual ~SessionLink() = default;
  // Queues a message; dropped silently once the stream has ended.
  virtual void Send(v1::DaemonMessage message) = 0;
  // Ends the stream with `status` once queued messages are written.
  virtual void Close(const absl::Status& status) = 0;
};

// A Register call waiting for its job to form. Finish is called exactly once.
class RegisterCall {
 public:
  virtual ~RegisterCall() = default;
  virtual uint64_t id() const = 0;
  virtual const v1::RegisterRequest& request() const = 0;
  virtual const PeerCredentials& peer() const = 0;
  // `response` is read only when status is OK.
  virtual void Finish(const absl::Status& status, const v1::RegisterResponse& response) = 0;
};

}  // namespace collective::daemon::job
