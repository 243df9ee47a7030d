#include "shm/futex.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <vector>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace collective::shm {

// The word is shared between processes, so these are the non-private futex
// operations: the kernel keys them by the backing page, not the address.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  timespec ts = absl::ToTimespec(timeout);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool FutexWaitAny(std::span<const FutexWaiter> waiters,
                  std::chrono::steady_clock::time_point deadline) {
  futex_waitv vector[kMaxFutexWaiters] = {};
  const size_t count = std::min(waiters.size(), kMaxFutexWaiters);
  for (size_t i = 0; i < count; ++i) {
    vector[i].val = waiters[i].expected;
    vector[i].uaddr = reinterpret_cast<uintptr_t>(waiters[i].word);
    vector[i].flags = FUTEX_32;
  }
  // libstdc++'s steady_clock is CLOCK_MONOTONIC, which futex_waitv takes as
  // an absolute deadline.
  const auto since_epoch = deadline.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  timespec timeout{
      static_cast<time_t>(seconds.count()),
      static_cast<long>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - seconds).count())};
  if (timeout.tv_sec < 0) timeout = {0, 0};
  const long result = ::syscall(SYS_futex_waitv, vector, count, 0, &timeout, CLOCK_MONOTONIC);
  return !(result < 0 && (errno == ENOSYS || errno == EPERM));
}

bool FutexWaitvAvailable() {
  static const bool available = [] {
    const long result = ::syscall(SYS_futex_waitv, nullptr, 0, 0, nullptr, CLOCK_MONOTONIC);
    return !(result < 0 && (errno == ENOSYS || errno == EPERM));
  }();
  return available;
}

}  // namespace collective::shm
