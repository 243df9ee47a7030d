#include "client/launcher/poll_set.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/launcher/launcher_output.h"

namespace collective::launcher {

void PollSet::Add(int fd, std::function<void()> on_ready) {
  fds_.push_back({fd, POLLIN, 0});
  callbacks_.push_back(std::move(on_ready));
}

void PollSet::AddWritable(int fd, std::function<void()> on_ready) {
  fds_.push_back({fd, POLLOUT, 0});
  callbacks_.push_back(std::move(on_ready));
}

bool PollSet::Wait(std::optional<absl::Time> deadline) {
  while (true) {
    int timeout_ms = -1;
    bool last = false;  // the deadline has passed: one look, without waiting
    if (deadline.has_value()) {
      const absl::Duration left = *deadline - absl::Now();
      last = left <= absl::ZeroDuration();
      // Rounded up, so that a wake-up never comes before the deadline.
      timeout_ms =
          last ? 0
               : static_cast<int>(std::min<int64_t>(
                     absl::ToInt64Milliseconds(left + absl::Milliseconds(1) - absl::Nanoseconds(1)),
                     1 << 30));
    }
    const int ready = ::poll(fds_.data(), fds_.size(), timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      // Only possible with more descriptors than RLIMIT_NOFILE allows, which
      // main rules out; the children's death signal takes them down.
      Say(absl::StrCat("poll failed: ", std::strerror(errno)));
      std::_Exit(1);
    }
    if (ready == 0) {
      if (last) return false;
      continue;  // a timeout: the deadline check above decides
    }
    for (size_t i = 0; i < fds_.size(); ++i) {
      if (fds_[i].revents != 0) callbacks_[i]();
    }
    return true;
  }
}

}  // namespace collective::launcher
