// systemd's watchdog (WatchdogSec= in the unit): systemd restarts the daemon
// when WATCHDOG=1 stops coming for that long. The pings come from the engine
// loop, so a wedged engine (the thread every registration, completion and
// shutdown goes through) is what stops them, not a thread of its own that
// would keep pinging for a daemon that serves nothing. Engine thread only.
#pragma once

#include <chrono>
#include <optional>

#include <sys/types.h>

namespace collective::daemon::observe {

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // The interval systemd asks for: WATCHDOG_USEC, when WATCHDOG_PID is
  // unset or names `self` (a child the daemon started would not be the
  // one watched). Both are systemd's variables, like NOTIFY_SOCKET, not
  // knobs of ours. nullopt: no watchdog.
  static std::optional<std::chrono::microseconds> IntervalFrom(const char* usec, const char* pid,
                                                               pid_t self);
  // From this process's environment.
  static Watchdog FromEnvironment();

  // `interval`: systemd's timeout; nullopt or zero disables the pings.
  explicit Watchdog(std::optional<std::chrono::microseconds> interval);

  bool enabled() const { return period_.count() > 0; }
  // How often a ping goes out: half of systemd's timeout, as sd_watchdog_enabled(3)
  // advises, so one late turn of the loop is not yet a restart.
  std::chrono::microseconds period() const { return period_; }
  // When the next ping is due (Clock::time_point::max() if disabled): for a
  // loop that sleeps until its next timer.
  Clock::time_point next_due() const { return next_; }

  // Every turn of the engine loop: sends WATCHDOG=1 when one is due. A
  // comparison otherwise.
  void Tick(Clock::time_point now);

 private:
  std::chrono::microseconds period_{0};
  Clock::time_point next_ = Clock::time_point::min();
};

}  // namespace collective::daemon::observe
