#include "daemon/engine/engine_doorbell.h"

#include <algorithm>

#include "common/logging.h"

namespace collective::daemon::engine {
namespace {

// Without futex_waitv, or beyond its 128 words, the engine polls the rings
// it cannot wait on this often.
constexpr auto kPollInterval = std::chrono::milliseconds(1);

}  // namespace

void EngineDoorbell::Ring() {
  word_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst) != 0) shm::FutexWakeAll(&word_);
}

void EngineDoorbell::Arm(const std::vector<shm::ClientSegmentHeader*>& clients) {
  clients_ = clients;
  waiters_.clear();
  waiters_.push_back({&word_, word_.load(std::memory_order_seq_cst)});
  for (shm::ClientSegmentHeader* client : clients_) {
    waiters_.push_back({&client->submit_word, client->submit_word.load(std::memory_order_seq_cst)});
  }
}

void EngineDoorbell::Sleep(std::chrono::steady_clock::time_point deadline) {
  sleeping_.store(1, std::memory_order_seq_cst);
  for (shm::ClientSegmentHeader* client : clients_) {
    client->daemon_sleeping.store(1, std::memory_order_seq_cst);
  }
  const bool all_watched = waiters_.size() <= shm::kMaxFutexWaiters;
  if (!all_watched) deadline = std::min(deadline, std::chrono::steady_clock::now() + kPollInterval);
  if (!shm::FutexWaitAny(waiters_, deadline)) {
    if (!warned_) {
      log::Daemon().warn("this kernel lacks futex_waitv (Linux 5.16); polling client rings");
      warned_ = true;
    }
    shm::FutexWait(&word_, waiters_.front().expected,
                   absl::FromChrono(std::min(deadline - std::chrono::steady_clock::now(),
                                             std::chrono::steady_clock::duration(kPollInterval))));
  }
  for (shm::ClientSegmentHeader* client : clients_) {
    client->daemon_sleeping.store(0, std::memory_order_relaxed);
  }
  sleeping_.store(0, std::memory_order_relaxed);
}

}  // namespace collective::daemon::engine
