// A client's Session stream on the daemon side: the gRPC bidi reactor that
// forwards client messages to the engine, and the link through which the
// engine writes back. Writes are queued and issued one at a time, as the
// callback API requires. The queue is bounded: a client that does not read
// its stream has its session ended rather than the daemon's memory grown.
// GrpcSessionLink is touched by the engine thread (Send, Close) and gRPC's
// threads (the reactions), under its mutex.
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
  // The most messages queued for one session. The stream carries only the
  // attach answer, job failures and answers to CUDA registrations, which a
  // client reads as they come; thousands unread mean a client that does not
  // read at all. A constant, not a knob: no deployment has reason to let a
  // client that does not read hold more of the daemon's memory.
  static constexpr size_t kMaxQueuedMessages = 4096;

  explicit GrpcSessionLink(SessionReactor* reactor) : reactor_(reactor) {}

  // Past kMaxQueuedMessages, drops what is queued and ends the session with
  // RESOURCE_EXHAUSTED.
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
  // Finish at once, without waiting for the queue (dropped) or for the write
  // in progress, which a client that does not read may never take.
  bool finish_now_ = false;
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
