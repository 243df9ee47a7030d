#include "client/launcher/signal_watcher.h"

#include <cerrno>
#include <cstring>

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace collective::launcher {

absl::StatusOr<SignalWatcher> SignalWatcher::Start(bool elastic) {
  sigset_t forwarded;
  sigemptyset(&forwarded);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) {
    // An ignored signal stays ignored, here and in the ranks, which inherit
    // that: `nohup collectiverun ...` must survive a hang-up, and so must
    // its ranks. (Blocked, it would be queued for the signalfd instead.)
    struct sigaction current {};
    if (::sigaction(signal, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    sigaddset(&forwarded, signal);
  }
  if (elastic) sigaddset(&forwarded, SIGUSR1);
  if (::sigprocmask(SIG_BLOCK, &forwarded, nullptr) != 0) {
    return absl::InternalError(absl::StrCat("sigprocmask: ", std::strerror(errno)));
  }
  ::signal(SIGPIPE, SIG_IGN);
  // Inherited SIGCHLD=SIG_IGN would have the kernel reap the children
  // itself, and their exit statuses would be lost.
  ::signal(SIGCHLD, SIG_DFL);
  UniqueFd fd(::signalfd(-1, &forwarded, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd.valid()) return absl::InternalError(absl::StrCat("signalfd: ", std::strerror(errno)));
  return SignalWatcher(std::move(fd));
}

std::optional<int> SignalWatcher::Take() const {
  signalfd_siginfo info{};
  ssize_t got;
  do {
    got = ::read(fd_.get(), &info, sizeof(info));
  } while (got < 0 && errno == EINTR);
  if (got != static_cast<ssize_t>(sizeof(info))) return std::nullopt;
  return static_cast<int>(info.ssi_signo);
}

}  // namespace collective::launcher
