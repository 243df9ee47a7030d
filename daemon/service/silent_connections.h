// New connections the accept loop holds until they say something. A gRPC
// client sends its connection preface as soon as it connects, so a
// connection that stays silent past its deadline is closed here instead of
// being handed to gRPC, which would keep it (and its descriptor) for as long
// as the peer likes. At most a given number wait at once; the oldest is
// closed to make room, so silent peers cannot take every descriptor. Touched
// only by the accept-loop thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <poll.h>
#include <sys/types.h>

namespace collective::daemon::service {

class SilentConnections {
 public:
  using Clock = std::chrono::steady_clock;

  // A connection held here, for the log when it is closed.
  struct Held {
    int fd;
    uid_t uid;
    std::string peer;  // PeerCredentials::ToString()
    Clock::time_point deadline;
  };

  explicit SilentConnections(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  ~SilentConnections();
  SilentConnections(const SilentConnections&) = delete;
  SilentConnections& operator=(const SilentConnections&) = delete;

  // Holds `fd` until it speaks or its deadline passes. When `capacity` are
  // held already, closes the oldest and returns it.
  std::optional<Held> Hold(int fd, uid_t uid, std::string peer, size_t capacity,
                           Clock::time_point now);

  // One pollfd (POLLIN) per held connection, appended to `fds` in order.
  void AppendPollFds(std::vector<pollfd>& fds) const;
  // `polled` are the entries AppendPollFds appended, after poll. Returns the
  // descriptors of the connections that spoke (the caller takes them);
  // closes those that hung up or failed without a word.
  std::vector<int> TakeSpoken(const pollfd* polled, size_t count);
  // Closes the connections whose deadline has passed; returns them.
  std::vector<Held> CloseExpired(Clock::time_point now);
  // Milliseconds until the next deadline (rounded up), or -1 if none.
  int MillisecondsToNextDeadline(Clock::time_point now) const;

  size_t size() const { return held_.size(); }

 private:
  const std::chrono::milliseconds timeout_;
  std::vector<Held> held_;  // oldest first
};

}  // namespace collective::daemon::service
