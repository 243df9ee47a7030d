// A client's Session stream on the daemon side: the gRPC bidi reactor that
// forwards client messages to the engine, and the link through which the
// engine writes back. Writes are queued and issued one at a time, as the
// callback API requires.
#pragma once

#include <deque>
#include <memory>
#include <mutex>

#include <grpcpp/grpcpp.h>

#include "collective/v1/collective.pb.h"
#include "daemon/engine/engine.h"
#include "daemon/job/peer_credentials.h"
#include "daemon/job/session_link.h"

namespace collective::daemon::service {

class SessionReactor;

class GrpcSessionLink final : public job::SessionLink {
 public:
  explicit GrpcSessionLink(SessionReactor* reactor) : reactor_(reactor) {}

  void Send(v1::DaemonMessage message) override;
  void Close(const absl::Status& status) override;

  // From the reactor.
  void OnWriteDone(bool ok);
  void OnDone();

 private:
  // Decided under the lock, done outside it: gRPC may run reactions inline.
  struct Action {
    enum Kind { kNone, kWrite, kFinish } kind = kNone;
    const v1::DaemonMessage* message = nullptr;
  };
  Action NextActionLocked();
  void Act(const Action& action);

  std::mutex mutex_;
  SessionReactor* reactor_;              // null once the RPC is done
  std::deque<v1::DaemonMessage> queue_;  // front() is being written when writing_
  bool writing_ = false;
  bool finish_requested_ = false;
  bool finished_ = false;
  grpc::Status finish_status_;
};

class SessionReactor final : public grpc::ServerBidiReactor<v1::ClientMessage, v1::DaemonMessage> {
 public:
  SessionReactor(engine::Engine& engine, job::PeerCredentials peer);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override { link_->OnWriteDone(ok); }
  void OnDone() override;

 private:
  engine::Engine& engine_;
  const job::PeerCredentials peer_;
  std::shared_ptr<GrpcSessionLink> link_;
  v1::ClientMessage incoming_;
};

}  // namespace collective::daemon::service
