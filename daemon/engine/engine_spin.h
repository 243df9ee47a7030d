// When the engine, finding nothing to do, looks again at once instead of
// sleeping: for a short window (engine_spin_us) after one of two moments
// where the next thing usually follows within microseconds and a sleep costs
// more than the wait:
//  - it ran every request its ranks had submitted: in a loop of small
//    collectives each rank submits its next request a few microseconds of
//    its own work after the completion wakes it (a Python caller's more than
//    a C++ one's), and an engine asleep by then costs every step a wake-up,
//    tens of microseconds. While ranks compute between collectives (a
//    backward pass submitting gradients as they come) some rank's requests
//    nearly always wait for the others', so the engine sleeps as before and
//    takes no core from them;
//  - across nodes, it made progress while another daemon owes it a
//    decision, a transfer's other half or a message's: Open MPI (4.x) reads
//    its TCP sockets and progresses nonblocking collectives only on every
//    8th progress call, which an engine that sleeps between looks reaches
//    hundreds of microseconds late.
// The looks yield the core between them, and the window is short: trainers
// and daemons of a node often outnumber its cores. Engine thread only.
#pragma once

#include <chrono>

#include "common/clock.h"

namespace collective::daemon::engine {

class EngineSpin {
 public:
  explicit EngineSpin(Clock::duration window) : window_(window) {}

  // The engine made progress at `now`.
  void Worked(Clock::time_point now) { last_worked_ = now; }
  // The engine ran, at `now`, every request its ranks had submitted.
  void Drained(Clock::time_point now) { last_drained_ = now; }
  // Whether to look again without sleeping: the engine drained its ranks'
  // requests within the window, or made progress within it while another
  // daemon owes it something (`owed`).
  bool Spins(Clock::time_point now, bool owed) const {
    return Within(last_drained_, now) || (owed && Within(last_worked_, now));
  }

 private:
  bool Within(Clock::time_point since, Clock::time_point now) const {
    return since != Clock::time_point{} && now - since < window_;
  }

  const Clock::duration window_;
  Clock::time_point last_worked_{};
  Clock::time_point last_drained_{};
};

}  // namespace collective::daemon::engine
