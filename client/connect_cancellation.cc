#include <utility>

#include "collective/client.h"

namespace collective {

void ConnectCancellation::Cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
  if (cancel_) cancel_();
}

bool ConnectCancellation::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

bool ConnectCancellation::Arm(std::function<void()> cancel) {
  std::lock_guard lock(mutex_);
  if (cancelled_) return false;
  cancel_ = std::move(cancel);
  return true;
}

void ConnectCancellation::Disarm() {
  // Under the lock: once this returns, Cancel no longer touches what
  // `cancel_` captured (the registration's gRPC context).
  std::lock_guard lock(mutex_);
  cancel_ = nullptr;
}

}  // namespace collective
