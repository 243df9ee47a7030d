// How the engine thread sleeps and who wakes it: any thread that posts an
// event (the engine's own word), or any attached client that published
// submissions (that client's submit_word). The engine waits on all of them
// at once with futex_waitv, so a submission wakes it directly, with no
// thread in between.
//
// Protocol, per loop: Arm (read every word) -> look for work -> if none,
// Sleep (announce sleeping, then wait while every word still holds the value
// Arm read). A word that moved after Arm ends the wait at once, so nothing
// published after the look is missed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "shm/futex.h"
#include "shm/segment_layout.h"

namespace collective::daemon::engine {

class EngineDoorbell {
 public:
  // Any thread.
  void Ring();

  // Engine thread.
  void Arm(const std::vector<shm::ClientSegmentHeader*>& clients);
  void Sleep(std::chrono::steady_clock::time_point deadline);

 private:
  std::atomic<uint32_t> word_{0};
  std::atomic<uint32_t> sleeping_{0};
  std::vector<shm::ClientSegmentHeader*> clients_;
  std::vector<shm::FutexWaiter> waiters_;
  bool warned_ = false;
};

}  // namespace collective::daemon::engine
