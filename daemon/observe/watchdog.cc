#include "daemon/observe/watchdog.h"

#include <cstdlib>

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "common/logging.h"
#include "daemon/observe/systemd_notify.h"

namespace collective::daemon::observe {

std::optional<std::chrono::microseconds> Watchdog::IntervalFrom(const char* usec, const char* pid,
                                                                pid_t self) {
  uint64_t microseconds = 0;
  if (usec == nullptr || !absl::SimpleAtoi(usec, &microseconds) || microseconds == 0) {
    return std::nullopt;
  }
  if (pid != nullptr && *pid != '\0') {
    int64_t watched = 0;
    if (!absl::SimpleAtoi(pid, &watched) || watched != self) return std::nullopt;
  }
  return std::chrono::microseconds(microseconds);
}

Watchdog Watchdog::FromEnvironment() {
  Watchdog watchdog(
      IntervalFrom(std::getenv("WATCHDOG_USEC"), std::getenv("WATCHDOG_PID"), ::getpid()));
  if (watchdog.enabled()) {
    log::Daemon().info("systemd watchdog: pinging every {} ms from the engine loop",
                       watchdog.period().count() / 1000);
  }
  return watchdog;
}

Watchdog::Watchdog(std::optional<std::chrono::microseconds> interval)
    : period_(interval.value_or(std::chrono::microseconds(0)) / 2),
      next_(period_.count() > 0 ? Clock::time_point::min() : Clock::time_point::max()) {}

void Watchdog::Tick(Clock::time_point now) {
  if (now < next_) return;
  NotifyWatchdog();
  next_ = now + period_;
}

}  // namespace collective::daemon::observe
