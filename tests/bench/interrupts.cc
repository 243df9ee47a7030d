#include "tests/bench/interrupts.h"

#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace collective::bench {

Interrupts::Interrupts() {
  sigemptyset(&signals_);
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals_, signal);
  pthread_sigmask(SIG_BLOCK, &signals_, &previous_);
  fd_ = ::signalfd(-1, &signals_, SFD_NONBLOCK | SFD_CLOEXEC);
}

Interrupts::~Interrupts() {
  if (fd_ >= 0) ::close(fd_);
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

std::optional<int> Interrupts::Take() {
  signalfd_siginfo info{};
  if (fd_ < 0 || ::read(fd_, &info, sizeof(info)) != sizeof(info)) return std::nullopt;
  return static_cast<int>(info.ssi_signo);
}

absl::StatusOr<testing::Subprocess> Interrupts::Start(
    const std::vector<std::string>& argv, const std::map<std::string, std::string>& environment) {
  // A signal that arrives between this check and the spawn still ends the
  // launcher at once; the window is one posix_spawn long.
  if (const std::optional<int> signal = Take()) return Interrupted(*signal);
  pthread_sigmask(SIG_UNBLOCK, &signals_, nullptr);
  auto process = testing::Subprocess::Start(argv, environment);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  return process;
}

absl::Status Interrupted(int signal) {
  const char* name = sigabbrev_np(signal);
  return absl::CancelledError(absl::StrCat("interrupted by SIG", name != nullptr ? name : "?"));
}

}  // namespace collective::bench
