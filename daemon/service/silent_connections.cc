#include "daemon/service/silent_connections.h"

#include <algorithm>
#include <cerrno>
#include <utility>

#include <sys/socket.h>
#include <unistd.h>

namespace collective::daemon::service {

SilentConnections::~SilentConnections() {
  for (const Held& held : held_) ::close(held.fd);
}

std::optional<SilentConnections::Held> SilentConnections::Hold(int fd, uid_t uid, std::string peer,
                                                               size_t capacity,
                                                               Clock::time_point now) {
  std::optional<Held> evicted;
  if (!held_.empty() && held_.size() >= capacity) {
    evicted = std::move(held_.front());
    held_.erase(held_.begin());
    ::close(evicted->fd);
  }
  held_.push_back({fd, uid, std::move(peer), now + timeout_});
  return evicted;
}

void SilentConnections::AppendPollFds(std::vector<pollfd>& fds) const {
  for (const Held& held : held_) fds.push_back({held.fd, POLLIN, 0});
}

std::vector<int> SilentConnections::TakeSpoken(const pollfd* polled, size_t count) {
  std::vector<int> spoken;
  std::vector<Held> waiting;
  for (size_t i = 0; i < held_.size(); ++i) {
    const short events = i < count ? polled[i].revents : 0;
    if (events == 0) {
      waiting.push_back(std::move(held_[i]));
      continue;
    }
    // A peer that hung up is readable too (end of file): only a byte says
    // that it spoke.
    char first = 0;
    const ssize_t peeked = ::recv(held_[i].fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (peeked > 0) {
      spoken.push_back(held_[i].fd);
    } else if (peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      waiting.push_back(std::move(held_[i]));
    } else {
      // Gone, or failed, before saying anything: nothing for gRPC to serve.
      ::close(held_[i].fd);
    }
  }
  held_ = std::move(waiting);
  return spoken;
}

std::vector<SilentConnections::Held> SilentConnections::CloseExpired(Clock::time_point now) {
  std::vector<Held> expired;
  // Deadlines grow with the order of arrival: the expired ones lead.
  while (!held_.empty() && held_.front().deadline <= now) {
    ::close(held_.front().fd);
    expired.push_back(std::move(held_.front()));
    held_.erase(held_.begin());
  }
  return expired;
}

int SilentConnections::MillisecondsToNextDeadline(Clock::time_point now) const {
  if (held_.empty()) return -1;
  const auto left = held_.front().deadline - now;
  if (left <= Clock::duration::zero()) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

}  // namespace collective::daemon::service
