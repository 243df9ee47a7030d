#include "daemon/service/session_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/logging.h"

namespace collective::daemon::service {

void GrpcSessionLink::Send(v1::DaemonMessage message) {
  Action action;
  {
    std::lock_guard lock(mutex_);
    if (reactor_ == nullptr || finish_requested_) return;
    if (queue_.size() >= kMaxQueuedMessages) {
      log::Rpc().warn("ending a session whose client has left {} messages unread", queue_.size());
      // The message being written stays: gRPC holds a pointer to it.
      queue_.erase(writing_ ? queue_.begin() + 1 : queue_.begin(), queue_.end());
      finish_requested_ = true;
      finish_now_ = true;
      finish_status_ = ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
          "collectived ended this session: the client does not read its session stream (",
          kMaxQueuedMessages, " messages were waiting), and the daemon does not queue more")));
    } else {
      queue_.push_back(std::move(message));
    }
    action = NextActionLocked();
  }
  Act(action);
}

void GrpcSessionLink::Close(const absl::Status& status) {
  Action action;
  {
    std::lock_guard lock(mutex_);
    if (reactor_ == nullptr || finish_requested_) return;
    finish_requested_ = true;
    finish_status_ = ToGrpcStatus(status);
    action = NextActionLocked();
  }
  Act(action);
}

void GrpcSessionLink::OnWriteDone(bool ok) {
  Action action;
  {
    std::lock_guard lock(mutex_);
    writing_ = false;
    if (!queue_.empty()) queue_.pop_front();
    // A failed write means the stream is broken: the rest cannot be written.
    if (!ok) queue_.clear();
    action = NextActionLocked();
  }
  Act(action);
}

void GrpcSessionLink::OnDone() {
  std::lock_guard lock(mutex_);
  reactor_ = nullptr;
  queue_.clear();
}

GrpcSessionLink::Action GrpcSessionLink::NextActionLocked() {
  if (finished_ || reactor_ == nullptr) return {};
  if (finish_now_) {
    finished_ = true;
    return {Action::kFinish, nullptr};
  }
  if (writing_) return {};
  if (!queue_.empty()) {
    writing_ = true;
    // deque::push_back keeps references valid, so the message stays put
    // while other threads queue more behind it.
    return {Action::kWrite, &queue_.front()};
  }
  if (finish_requested_) {
    finished_ = true;
    return {Action::kFinish, nullptr};
  }
  return {};
}

void GrpcSessionLink::Act(const Action& action) {
  // The reactor outlives these calls: gRPC deletes it (OnDone) only after the
  // finish issued here, and never while a write issued here is pending.
  switch (action.kind) {
    case Action::kNone:
      return;
    case Action::kWrite:
      reactor_->StartWrite(action.message);
      return;
    case Action::kFinish:
      reactor_->Finish(finish_status_);
      return;
  }
}

SessionReactor::SessionReactor(engine::Engine& engine, job::PeerCredentials peer)
    : engine_(engine), peer_(peer), link_(std::make_shared<GrpcSessionLink>(this)) {
  StartRead(&incoming_);
}

void SessionReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The client closed its side or went away; the engine decides which.
    if (!engine_.Post(engine::SessionClosedEvent{link_})) {
      link_->Close(engine_.Refusal());
    }
    return;
  }
  if (!engine_.Post(engine::ClientMessageEvent{link_, peer_, std::move(incoming_)})) {
    link_->Close(engine_.Refusal());
    return;
  }
  incoming_.Clear();
  StartRead(&incoming_);
}

void SessionReactor::OnDone() {
  link_->OnDone();
  delete this;
}

}  // namespace collective::daemon::service
