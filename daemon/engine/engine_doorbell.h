// How the engine thread sleeps and who wakes it: any thread that posts an
// event (the engine's own word), or any attached client that published
// submissions.
//
// Two ways to sleep, chosen per sleep:
// - On every word at once (futex_waitv, Linux 5.16+): the engine's own word
//   and each client's submit_word, in the client's own segment, so a
//   submission wakes the engine directly and no client can disturb another.
// - On a job's doorbell word alone, which every client of the job rings
//   (and the engine's other threads too): kernels without futex_waitv
//   (Ubuntu 22.04's 5.15, RHEL 8, gVisor), more clients than one futex_waitv
//   takes, or engine_wait: doorbell. As fast, but every client may write the
//   word: one that stores old values into it could make the engine miss a
//   ring, so a doorbell sleep lasts at most doorbell_slice before the engine
//   looks again. One futex waits on one word: while several jobs run, a
//   doorbell sleep lasts at most kSharedSlice, so that another job's ring
//   waits that long at most.
//
// Protocol, per loop: Arm (read every word) -> look for work -> if none,
// Sleep: announce in every client's daemon_sleeping which word to ring,
// re-check every word against what Arm read (a Dekker pair with the ringer,
// which bumps its word before it reads daemon_sleeping), then wait while the
// word slept on still holds the value Arm read. Nothing published after the
// look is missed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "config/daemon_config.h"
#include "daemon/job/job_doorbell.h"
#include "shm/futex.h"
#include "shm/segment_layout.h"

namespace collective::daemon::engine {

class EngineDoorbell {
 public:
  static constexpr std::chrono::milliseconds kDefaultDoorbellSlice{10};
  // The longest doorbell sleep while several jobs run.
  static constexpr std::chrono::microseconds kSharedSlice{200};

  explicit EngineDoorbell(config::EngineWait wait = config::EngineWait::kAuto,
                          std::chrono::milliseconds doorbell_slice = kDefaultDoorbellSlice);

  // Any thread.
  void Ring();

  // Engine thread. `doorbells`: every job's (none while no job formed).
  void Arm(const std::vector<shm::ClientSegmentHeader*>& clients,
           std::vector<std::shared_ptr<job::JobDoorbell>> doorbells);
  void Sleep(std::chrono::steady_clock::time_point deadline);

  // Engine thread: whether the last sleep was on the doorbell.
  bool slept_on_doorbell() const { return last_sleep_ == shm::kDaemonSleepsOnDoorbell; }

 private:
  void Announce(shm::DaemonSleep how);
  // Whether any word moved since Arm.
  bool MovedSinceArm() const;
  // False where the kernel refused futex_waitv.
  bool SleepOnEveryWord(std::chrono::steady_clock::time_point deadline);
  void SleepOnDoorbell(std::chrono::steady_clock::time_point deadline);

  const std::chrono::milliseconds doorbell_slice_;
  bool futex_waitv_;  // false: every sleep is on the doorbell

  std::atomic<uint32_t> word_{0};
  std::atomic<uint32_t> sleeping_{shm::kDaemonAwake};  // a shm::DaemonSleep
  std::vector<shm::ClientSegmentHeader*> clients_;
  std::vector<shm::FutexWaiter> waiters_;  // word_, then every client's submit_word
  uint32_t doorbell_armed_ = 0;
  shm::DaemonSleep last_sleep_ = shm::kDaemonAwake;

  // The jobs' doorbells: replaced by the engine thread, rung by any. A
  // doorbell sleep waits on the first.
  std::mutex doorbell_mutex_;
  std::vector<std::shared_ptr<job::JobDoorbell>> doorbells_;
};

}  // namespace collective::daemon::engine
