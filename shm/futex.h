// Cross-process futex wait and wake on a 32-bit word in shared memory.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>

#include "absl/time/time.h"

namespace collective::shm {

// Blocks while *word == expected, for at most `timeout` (spurious returns are
// possible; callers re-check their condition). Never blocks if the value
// already differs.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout);

// Wakes every thread of every process blocked on `word`.
void FutexWakeAll(std::atomic<uint32_t>* word);

struct FutexWaiter {
  std::atomic<uint32_t>* word;
  uint32_t expected;
};
inline constexpr size_t kMaxFutexWaiters = 128;

// Blocks until any word differs from its expected value or is woken, or the
// deadline passes (at most kMaxFutexWaiters words; Linux 5.16's futex_waitv).
// False if the kernel lacks futex_waitv (or a sandbox refuses it).
bool FutexWaitAny(std::span<const FutexWaiter> waiters,
                  std::chrono::steady_clock::time_point deadline);

// Whether this kernel offers futex_waitv, asked once (an empty call fails
// with EINVAL where the call exists).
bool FutexWaitvAvailable();

}  // namespace collective::shm
