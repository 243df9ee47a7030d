#include "daemon/stop_signal.h"

#include <cerrno>
#include <cstring>

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace collective::daemon {

absl::StatusOr<std::unique_ptr<StopSignal>> StopSignal::Create() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  // mpirun forwards SIGUSR1 and SIGUSR2 to its processes, but turns a
  // SIGTERM of its own into killing them (SIGTERM, SIGKILL a second later),
  // which leaves a daemon no time to meet the others in MPI_Finalize: a
  // launcher stops daemons it started under mpirun with SIGUSR2.
  sigaddset(&signals, SIGUSR2);
  // A launcher that knows a node of the world is lost (its daemon died, or
  // its machine is unreachable) stops the others with SIGUSR1: they leave
  // MPI at once instead of waiting for that node's stop notice.
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const int signal_fd = ::signalfd(-1, &signals, SFD_CLOEXEC);
  if (signal_fd < 0) {
    return absl::InternalError(absl::StrCat("signalfd failed: ", std::strerror(errno)));
  }
  const int event_fd = ::eventfd(0, EFD_CLOEXEC);
  if (event_fd < 0) {
    ::close(signal_fd);
    return absl::InternalError(absl::StrCat("eventfd failed: ", std::strerror(errno)));
  }
  return std::unique_ptr<StopSignal>(new StopSignal(signal_fd, event_fd));
}

StopSignal::~StopSignal() {
  ::close(signal_fd_);
  ::close(event_fd_);
}

void StopSignal::Request(std::string text, int exit_code) {
  {
    std::lock_guard lock(mutex_);
    if (requested_) return;
    requested_ = true;
    requested_reason_ = {std::move(text), exit_code};
  }
  const uint64_t one = 1;
  (void)!::write(event_fd_, &one, sizeof(one));
}

StopSignal::Reason StopSignal::Wait() {
  pollfd fds[] = {{signal_fd_, POLLIN, 0}, {event_fd_, POLLIN, 0}};
  while (true) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return {absl::StrCat("poll failed: ", std::strerror(errno)), 1};
    }
    if (fds[1].revents & POLLIN) {
      std::lock_guard lock(mutex_);
      return requested_reason_;
    }
    signalfd_siginfo info{};
    if ((fds[0].revents & POLLIN) && ::read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      const int signal = static_cast<int>(info.ssi_signo);
      const char* name = sigabbrev_np(signal);
      if (signal == SIGUSR1) {
        return {"received SIGUSR1: a node of the MPI world is lost", 0, /*world_lost=*/true};
      }
      return {absl::StrCat("received SIG", name != nullptr ? name : "?"), 0};
    }
  }
}

}  // namespace collective::daemon
