// The client's control-plane conversation with its daemon over gRPC:
// Register, then one Session stream for the client's lifetime that attaches
// the client, carries job failures and the answers to CUDA registrations,
// says goodbye, and by breaking tells the daemon the client died.
// (Submissions and releases travel in the segment's submission ring, and
// every request's answer, with a failure's text, in its completion ring: see
// client_core.h.)
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/client.h"
#include "collective/v1/collective.grpc.pb.h"

namespace collective::internal {

// What the daemon says on its own initiative. Called on gRPC threads.
class SessionListener {
 public:
  virtual ~SessionListener() = default;
  virtual void OnJobFailed(absl::Status status) = 0;
  // The daemon's answer to a RegisterCuda message.
  virtual void OnCudaRegistered(uint64_t registration_id, absl::Status status) = 0;
  // The stream is gone; no more messages or completions will come.
  virtual void OnSessionEnded(absl::Status status) = 0;
};

class Session {
 public:
  explicit Session(const std::string& socket_path);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Waits up to `timeout` for the daemon to accept connections (it may
  // still be starting). UNAVAILABLE if it did not.
  absl::Status AwaitDaemon(absl::Duration timeout);

  // Blocks until the job has formed, the timeout passes, or `cancellation`
  // (may be null) is cancelled.
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request,
                                                absl::Duration timeout,
                                                ConnectCancellation* cancellation);

  // Opens the stream and attaches it to the registered client; returns once
  // the daemon confirmed. `listener` must outlive the session.
  absl::Status Attach(uint64_t client_id, const std::string& token, SessionListener* listener,
                      absl::Duration timeout);

  // Says goodbye, closes the stream, and waits (up to `timeout`) for the
  // daemon to end it. Idempotent.
  absl::Status Leave(absl::Duration timeout);

  absl::StatusOr<v1::TimelineResponse> Timeline(const v1::TimelineRequest& request);

 private:
  class Stream;

  const std::string socket_path_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::CollectiveService::Stub> stub_;
  std::unique_ptr<Stream> stream_;
};

}  // namespace collective::internal
