#include "tests/bench/child_watch.h"

#include <cerrno>
#include <cstring>
#include <optional>

#include <poll.h>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/bench/pid_fd.h"

namespace collective::bench {
namespace {

// The end of a long stderr says why a process failed; the beginning is noise.
constexpr size_t kStderrTail = 6000;

std::string Tail(const std::string& text) {
  return text.size() <= kStderrTail ? text : "..." + text.substr(text.size() - kStderrTail);
}

std::string DescribeFailure(const WatchedChild& child, int status) {
  const std::string how = WIFEXITED(status) ? absl::StrCat("exited with ", WEXITSTATUS(status))
                          : WIFSIGNALED(status)
                              ? absl::StrCat("was killed by signal ", WTERMSIG(status))
                              : absl::StrCat("ended with status ", status);
  return absl::StrCat(child.name, " (pid ", child.process->pid(), ") ", how, "; its stderr:\n",
                      Tail(child.process->Stderr()));
}

}  // namespace

absl::Status AwaitChildren(const std::vector<WatchedChild>& children,
                           const std::vector<pid_t>& daemon_pids, absl::Time deadline,
                           Interrupts& interrupts) {
  std::vector<PidFd> pidfds;
  std::vector<bool> done(children.size(), false);
  for (const auto& child : children) {
    pidfds.emplace_back(child.process->pid());
    if (pidfds.back().fd() < 0) {
      return absl::InternalError(
          absl::StrCat("pidfd_open(", child.name, "): ", std::strerror(errno)));
    }
  }
  std::vector<PidFd> daemons;
  for (const pid_t pid : daemon_pids) daemons.emplace_back(pid);
  size_t running = children.size();
  while (running > 0) {
    std::vector<pollfd> fds;
    std::vector<size_t> owners;
    for (size_t i = 0; i < children.size(); ++i) {
      if (done[i]) continue;
      fds.push_back({pidfds[i].fd(), POLLIN, 0});
      owners.push_back(i);
    }
    fds.push_back({interrupts.fd(), POLLIN, 0});
    // A daemon already gone has no pidfd: its clients' failures say so.
    for (const PidFd& daemon : daemons) fds.push_back({daemon.fd(), POLLIN, 0});
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      std::string stuck;
      for (size_t i = 0; i < children.size(); ++i) {
        if (!done[i]) absl::StrAppend(&stuck, stuck.empty() ? "" : ", ", children[i].name);
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "still running at the deadline (raise --timeout if the machine is just slow): ", stuck));
    }
    const int ready =
        ::poll(fds.data(), fds.size(), static_cast<int>(absl::ToInt64Milliseconds(left) + 1));
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (const std::optional<int> signal = interrupts.Take()) return Interrupted(*signal);
    // A dead daemon is the cause of whatever its clients report next.
    for (size_t d = 0; d < daemons.size(); ++d) {
      if (fds[owners.size() + 1 + d].revents != 0) {
        return absl::UnavailableError(absl::StrCat("collectived (pid ", daemons[d].pid(),
                                                   ") exited while the benchmark ran"));
      }
    }
    std::string failures;
    for (size_t f = 0; f < owners.size(); ++f) {
      if (fds[f].revents == 0) continue;
      const WatchedChild& child = children[owners[f]];
      const std::optional<int> status = child.process->Wait(absl::ZeroDuration());
      if (!status.has_value()) continue;
      done[owners[f]] = true;
      --running;
      if (!testing::ExitedCleanly(status)) {
        absl::StrAppend(&failures, failures.empty() ? "" : "\n", DescribeFailure(child, *status));
      }
    }
    if (!failures.empty()) return absl::InternalError(failures);
  }
  return absl::OkStatus();
}

void StopChildren(const std::vector<WatchedChild>& children, absl::Duration grace) {
  for (const auto& child : children) child.process->Signal(SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  for (const auto& child : children) {
    child.process->Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()));
  }
  for (const auto& child : children) {
    child.process->Signal(SIGKILL);
    child.process->Wait(absl::Seconds(10));
  }
}

}  // namespace collective::bench
