#include "daemon/engine/engine_doorbell.h"

#include <algorithm>

#include "common/logging.h"

namespace collective::daemon::engine {
namespace {

// A doorbell the daemon's mapping lost (its owner truncated it) reaches no
// one: the engine then looks at the rings this often.
constexpr auto kPollInterval = std::chrono::milliseconds(1);

}  // namespace

EngineDoorbell::EngineDoorbell(config::EngineWait wait, std::chrono::milliseconds doorbell_slice)
    : doorbell_slice_(doorbell_slice),
      futex_waitv_(wait == config::EngineWait::kAuto && shm::FutexWaitvAvailable()) {
  if (wait == config::EngineWait::kDoorbell) {
    log::Daemon().info("the engine sleeps on each job's doorbell (engine_wait: doorbell)");
  } else if (!futex_waitv_) {
    log::Daemon().info(
        "this kernel lacks futex_waitv (Linux 5.16); the engine sleeps on each job's doorbell");
  }
}

void EngineDoorbell::Ring() {
  word_.fetch_add(1, std::memory_order_seq_cst);
  switch (sleeping_.load(std::memory_order_seq_cst)) {
    case shm::kDaemonSleepsOnSubmitWord:
      shm::FutexWakeAll(&word_);
      break;
    case shm::kDaemonSleepsOnDoorbell: {
      std::lock_guard lock(doorbell_mutex_);
      std::atomic<uint32_t>* target = doorbells_.empty() ? &word_ : doorbells_.front()->word();
      if (target != &word_) target->fetch_add(1, std::memory_order_seq_cst);
      shm::FutexWakeAll(target);
      break;
    }
    default:
      break;
  }
}

void EngineDoorbell::Arm(const std::vector<shm::ClientSegmentHeader*>& clients,
                         std::vector<std::shared_ptr<job::JobDoorbell>> doorbells) {
  // Replaced under the lock Ring takes, so that a ring from another thread
  // never touches a doorbell whose job went.
  if (doorbells != doorbells_) {
    std::lock_guard lock(doorbell_mutex_);
    doorbells_ = std::move(doorbells);
  }
  if (!doorbells_.empty()) {
    doorbell_armed_ = doorbells_.front()->word()->load(std::memory_order_seq_cst);
  }
  clients_ = clients;
  waiters_.clear();
  waiters_.push_back({&word_, word_.load(std::memory_order_seq_cst)});
  for (shm::ClientSegmentHeader* client : clients_) {
    waiters_.push_back({&client->submit_word, client->submit_word.load(std::memory_order_seq_cst)});
  }
}

void EngineDoorbell::Announce(shm::DaemonSleep how) {
  sleeping_.store(how, std::memory_order_seq_cst);
  for (shm::ClientSegmentHeader* client : clients_) {
    client->daemon_sleeping.store(how, std::memory_order_seq_cst);
  }
}

bool EngineDoorbell::MovedSinceArm() const {
  for (const shm::FutexWaiter& waiter : waiters_) {
    if (waiter.word->load(std::memory_order_seq_cst) != waiter.expected) return true;
  }
  return false;
}

void EngineDoorbell::Sleep(std::chrono::steady_clock::time_point deadline) {
  const bool on_every_word =
      futex_waitv_ && waiters_.size() <= shm::kMaxFutexWaiters && SleepOnEveryWord(deadline);
  if (!on_every_word) SleepOnDoorbell(deadline);
  Announce(shm::kDaemonAwake);
}

bool EngineDoorbell::SleepOnEveryWord(std::chrono::steady_clock::time_point deadline) {
  Announce(shm::kDaemonSleepsOnSubmitWord);
  last_sleep_ = shm::kDaemonSleepsOnSubmitWord;
  if (shm::FutexWaitAny(waiters_, deadline)) return true;
  log::Daemon().info("the kernel refused futex_waitv; the engine sleeps on each job's doorbell");
  futex_waitv_ = false;
  return false;
}

void EngineDoorbell::SleepOnDoorbell(std::chrono::steady_clock::time_point deadline) {
  Announce(shm::kDaemonSleepsOnDoorbell);
  last_sleep_ = shm::kDaemonSleepsOnDoorbell;
  if (MovedSinceArm()) return;
  std::atomic<uint32_t>* word = &word_;
  uint32_t expected = waiters_.front().expected;
  auto slice = std::chrono::steady_clock::duration::max();
  if (!doorbells_.empty() && !doorbells_.front()->faulted()) {
    word = doorbells_.front()->word();
    expected = doorbell_armed_;
    slice = doorbells_.size() == 1
                ? std::chrono::duration_cast<std::chrono::steady_clock::duration>(doorbell_slice_)
                : std::chrono::duration_cast<std::chrono::steady_clock::duration>(kSharedSlice);
  } else if (!clients_.empty()) {
    slice = kPollInterval;
  }
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return;
  shm::FutexWait(word, expected, absl::FromChrono(std::min(left, slice)));
}

}  // namespace collective::daemon::engine
