#include "client/session.h"

#include <chrono>
#include <utility>

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/socket_access.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace collective::internal {
namespace {

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

}  // namespace

// The Session stream's reactor. gRPC runs its reactions on its own threads.
// Every decision is taken under `mutex_` by NextActionLocked, and every gRPC
// call is made outside it (reactions may run inline).
class Session::Stream final : public grpc::ClientBidiReactor<v1::ClientMessage, v1::DaemonMessage> {
 public:
  Stream(v1::CollectiveService::Stub* stub, SessionListener* listener) : listener_(listener) {
    stub->async()->Session(&context_, this);
  }

  absl::Status Open(uint64_t client_id, const std::string& token, absl::Duration timeout) {
    // Operations may be started before StartCall; they go out with it.
    Enqueue(
        [&](v1::ClientMessage& message) {
          message.mutable_attach()->set_client_id(client_id);
          message.mutable_attach()->set_session_token(token);
        },
        /*flush=*/true);
    StartRead(&incoming_);
    StartCall();
    std::unique_lock lock(mutex_);
    state_.wait_for(lock, absl::ToChronoSeconds(timeout), [this] { return attached_ || done_; });
    if (attached_) return absl::OkStatus();
    if (done_) return Annotate(FromGrpcStatus(final_status_), "collectived refused the session");
    return absl::DeadlineExceededError("collectived did not confirm the session in time");
  }

  // Applies `edit` to the message being assembled. It goes out now if
  // `flush` and no write is in flight, else with the next write.
  template <class Edit>
  void Enqueue(Edit&& edit, bool flush) {
    Action action;
    {
      std::lock_guard lock(mutex_);
      if (done_ || closing_) return;
      edit(next_);
      has_next_ = true;
      flush_requested_ = flush_requested_ || flush;
      action = NextActionLocked();
    }
    Act(action);
  }

  // Sends Leave, then WritesDone, and waits for the daemon to end the
  // stream. DEADLINE_EXCEEDED (after cancelling) if it does not in time.
  absl::Status Close(absl::Duration timeout) {
    Action action;
    {
      std::lock_guard lock(mutex_);
      if (!done_ && !closing_) {
        next_.mutable_leave();
        has_next_ = true;
        closing_ = true;
      }
      action = NextActionLocked();
    }
    Act(action);
    std::unique_lock lock(mutex_);
    if (state_.wait_for(lock, absl::ToChronoSeconds(timeout), [this] { return done_; })) {
      return absl::OkStatus();
    }
    lock.unlock();
    context_.TryCancel();
    lock.lock();
    state_.wait(lock, [this] { return done_; });
    return absl::DeadlineExceededError(
        "collectived did not acknowledge the goodbye in time; the session was cancelled");
  }

  // Ends the stream now (for destruction) and waits until gRPC is done with it.
  void Cancel() {
    context_.TryCancel();
    std::unique_lock lock(mutex_);
    state_.wait(lock, [this] { return done_; });
  }

  void OnWriteDone(bool ok) override { OnOperationDone(ok); }
  void OnWritesDoneDone(bool ok) override { OnOperationDone(ok); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the daemon ended the stream; OnDone follows
    switch (incoming_.body_case()) {
      case v1::DaemonMessage::kAttached: {
        std::lock_guard lock(mutex_);
        attached_ = true;
        state_.notify_all();
        break;
      }
      case v1::DaemonMessage::kJobFailed: {
        const v1::JobFailed& failed = incoming_.job_failed();
        listener_->OnJobFailed(absl::Status(StatusCodeFromInt(failed.code()), failed.message()));
        break;
      }
      case v1::DaemonMessage::kCudaRegistered: {
        const v1::CudaRegistered& registered = incoming_.cuda_registered();
        listener_->OnCudaRegistered(
            registered.registration_id(),
            absl::Status(StatusCodeFromInt(registered.code()), registered.message()));
        break;
      }
      default:
        log::Client().warn("ignoring an unknown message from collectived");
    }
    incoming_.Clear();
    StartRead(&incoming_);
  }

  void OnDone(const grpc::Status& status) override {
    bool closing;
    {
      std::lock_guard lock(mutex_);
      final_status_ = status;
      closing = closing_;
    }
    if (!closing || !status.ok()) {
      absl::Status ended = FromGrpcStatus(status);
      if (ended.ok()) ended = absl::UnavailableError("collectived ended the session");
      listener_->OnSessionEnded(Annotate(ended, "the session with collectived ended"));
    }
    // gRPC does not touch the reactor after OnDone; waiters may destroy it
    // as soon as they see done_.
    std::lock_guard lock(mutex_);
    done_ = true;
    state_.notify_all();
  }

 private:
  struct Action {
    enum Kind { kNone, kWrite, kWritesDone } kind = kNone;
  };

  Action NextActionLocked() {
    if (done_ || busy_) return {};
    if (has_next_ && (flush_requested_ || closing_)) {
      busy_ = true;
      current_.Swap(&next_);
      next_.Clear();
      has_next_ = false;
      flush_requested_ = false;
      return {Action::kWrite};
    }
    if (closing_ && !writes_done_sent_) {
      busy_ = true;
      writes_done_sent_ = true;
      return {Action::kWritesDone};
    }
    return {};
  }

  void Act(const Action& action) {
    switch (action.kind) {
      case Action::kNone:
        return;
      case Action::kWrite:
        StartWrite(&current_);
        return;
      case Action::kWritesDone:
        StartWritesDone();
        return;
    }
  }

  void OnOperationDone(bool ok) {
    Action action;
    {
      std::lock_guard lock(mutex_);
      busy_ = false;
      if (!ok) return;  // the stream is broken; OnDone follows
      action = NextActionLocked();
    }
    Act(action);
  }

  SessionListener* listener_;
  grpc::ClientContext context_;
  v1::DaemonMessage incoming_;

  std::mutex mutex_;
  std::condition_variable state_;
  v1::ClientMessage current_;  // being written while busy_
  v1::ClientMessage next_;     // being assembled
  bool has_next_ = false;
  bool flush_requested_ = false;
  bool busy_ = false;  // a write or WritesDone is in flight
  bool closing_ = false;
  bool writes_done_sent_ = false;
  bool attached_ = false;
  bool done_ = false;
  grpc::Status final_status_;
};

Session::Session(const std::string& socket_path) : socket_path_(socket_path) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(64 << 20);
  // A daemon that is still starting (AwaitDaemon) is tried again soon: the
  // socket is local, and gRPC's default first wait is a second.
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  channel_ = grpc::CreateCustomChannel("unix:" + socket_path, grpc::InsecureChannelCredentials(),
                                       arguments);
  stub_ = v1::CollectiveService::NewStub(channel_);
}

Session::~Session() {
  if (stream_) stream_->Cancel();
}

absl::Status Session::AwaitDaemon(absl::Duration timeout) {
  // At once, rather than after the timeout with gRPC's "Permission denied".
  RETURN_IF_ERROR(CheckSocketAccess(socket_path_));
  if (channel_->WaitForConnected(DeadlineAfter(timeout))) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("collectived did not accept connections on ", socket_path_, " within ",
                   absl::FormatDuration(timeout), " (COLLECTIVE_CONNECT_TIMEOUT_SECONDS)"));
}

absl::StatusOr<v1::RegisterResponse> Session::Register(const v1::RegisterRequest& request,
                                                       absl::Duration timeout,
                                                       ConnectCancellation* cancellation) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(timeout));
  if (cancellation != nullptr && !cancellation->Arm([&context] { context.TryCancel(); })) {
    return absl::CancelledError("the registration was cancelled before it started");
  }
  v1::RegisterResponse response;
  const grpc::Status status = stub_->Register(&context, request, &response);
  if (cancellation != nullptr) cancellation->Disarm();
  if (status.ok()) return response;
  if (status.error_code() == grpc::StatusCode::CANCELLED && cancellation != nullptr &&
      cancellation->cancelled()) {
    return absl::CancelledError("the registration was cancelled while the job formed");
  }
  // The daemon's policy does not admit this uid: its text says why and how
  // to be admitted.
  if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED &&
      absl::StartsWith(status.error_message(), "collectived refuses")) {
    return absl::PermissionDeniedError(absl::StrCat("collectived at ", socket_path_,
                                                    " refused this process (uid ", ::geteuid(),
                                                    "): ", status.error_message()));
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    RETURN_IF_ERROR(CheckSocketAccess(socket_path_));
  }
  // gRPC's own (the daemon is not there, or closed the connection) rather
  // than the daemon's, which name collectived: the socket path, which often
  // names it too (/run/collectived/collectived.sock), does not count.
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      !absl::StrContains(absl::StrReplaceAll(status.error_message(), {{socket_path_, ""}}),
                         "collectived")) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach collectived at ", socket_path_, ": ", status.error_message(),
                     " (is the daemon running? set COLLECTIVE_SOCKET to its socket; a daemon "
                     "closes at once the connections of a user who holds too many)"));
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      status.error_message() == "Deadline Exceeded") {
    return absl::DeadlineExceededError(absl::StrCat("the job did not form within ",
                                                    absl::FormatDuration(timeout),
                                                    " (the other local ranks did not register)"));
  }
  return FromGrpcStatus(status);
}

absl::Status Session::Attach(uint64_t client_id, const std::string& token,
                             SessionListener* listener, absl::Duration timeout) {
  stream_ = std::make_unique<Stream>(stub_.get(), listener);
  return stream_->Open(client_id, token, timeout);
}

absl::StatusOr<v1::TimelineResponse> Session::Timeline(const v1::TimelineRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Seconds(30)));
  v1::TimelineResponse response;
  const grpc::Status status = stub_->Timeline(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status Session::Leave(absl::Duration timeout) {
  if (!stream_) return absl::OkStatus();
  return stream_->Close(timeout);
}

}  // namespace collective::internal
