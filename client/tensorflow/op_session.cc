#include "op_session.h"

#include <cstdint>
#include <shared_mutex>
#include <utility>

namespace collective::tensorflow {
namespace {

// Kernels share it while they submit; Attach takes it alone.
std::shared_mutex current_mutex;
std::unique_ptr<OpSession> current;  // guarded by current_mutex

}  // namespace

OpSession::OpSession(collective_client_t* client) : client_(client), thread_([this] { Run(); }) {}

OpSession::~OpSession() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  pending_added_.notify_one();
  thread_.join();
  collective_close(client_);
}

void OpSession::Submit(collective_handle_t handle, std::function<void(const Completion&)> finish) {
  Push({handle, std::move(finish), nullptr});
}

void OpSession::Call(std::function<void(collective_client_t*)> call) {
  Push({0, nullptr, std::move(call)});
}

void OpSession::Push(Pending pending) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(pending));
  }
  pending_added_.notify_one();
}

void OpSession::Run() {
  for (;;) {
    Pending next;
    {
      std::unique_lock lock(mutex_);
      pending_added_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, with every request finished
      next = std::move(pending_.front());
      pending_.pop_front();
    }
    if (next.call) {
      next.call(client_);
      continue;
    }
    Completion completion;
    completion.client = client_;
    completion.handle = next.handle;
    completion.code =
        collective_wait(client_, next.handle, -1.0, &completion.view, &completion.bytes);
    if (completion.code != 0) completion.message = collective_last_error();
    next.finish(completion);
    // A no-op for requests that had an output or failed.
    collective_release(client_, next.handle);
  }
}

bool OpSession::WithCurrent(const std::function<void(OpSession&)>& use) {
  std::shared_lock lock(current_mutex);
  if (current == nullptr) return false;
  use(*current);
  return true;
}

void OpSession::Attach(std::unique_ptr<OpSession> session) {
  std::unique_ptr<OpSession> previous;
  {
    std::unique_lock lock(current_mutex);
    previous = std::exchange(current, std::move(session));
  }
  // Destroyed outside the lock: its completions may start kernels (from
  // `done`) that take the lock to find there is no session now.
  previous.reset();
}

}  // namespace collective::tensorflow

// Called by collective.tensorflow (through ctypes) with collective._core's
// Client::address after init(), and with 0 at shutdown() before that client
// closes.
extern "C" __attribute__((visibility("default"))) void collective_tensorflow_attach(
    uintptr_t cpp_client) {
  using collective::tensorflow::OpSession;
  if (cpp_client == 0) {
    OpSession::Attach(nullptr);
    return;
  }
  OpSession::Attach(
      std::make_unique<OpSession>(collective_borrow(reinterpret_cast<void*>(cpp_client))));
}
