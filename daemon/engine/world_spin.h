// When the engine, owed something by another daemon, looks again at once
// instead of sleeping: for a short window after it last made progress,
// while a tensor it announced awaits node 0's decision, a transfer runs, or
// a message's other half is due. Then the reply usually follows within
// microseconds, and a sleep costs more than the wait: the wake-up, and
// Open MPI (4.x) reading its TCP sockets and progressing nonblocking
// collectives only on every 8th progress call, which an engine that sleeps
// between looks reaches hundreds of microseconds late. The looks yield the
// core between them, and the window is short: trainers and daemons of a
// node often outnumber its cores. Engine thread only.
#pragma once

#include <chrono>

#include "common/clock.h"

namespace collective::daemon::engine {

class WorldSpin {
 public:
  static constexpr Clock::duration kWindow = std::chrono::microseconds(200);

  // The engine made progress at `now`.
  void Worked(Clock::time_point now) { last_worked_ = now; }
  // Whether to look again without sleeping: another daemon owes the engine
  // something (`owed`) and it made progress within the window.
  bool Spins(Clock::time_point now, bool owed) const {
    return owed && now - last_worked_ < kWindow;
  }

 private:
  Clock::time_point last_worked_{};
};

}  // namespace collective::daemon::engine
