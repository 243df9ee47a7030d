// SilentConnections: a held connection goes to the caller once it speaks,
// is closed when its peer hangs up, when its deadline passes, or (the
// oldest) when too many are held.
#include "daemon/service/silent_connections.h"

#include <chrono>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace collective::daemon::service {
namespace {

using Clock = SilentConnections::Clock;
constexpr std::chrono::milliseconds kTimeout{1000};

// A connected pair: .held goes to SilentConnections, .peer stays here.
struct Connection {
  int held = -1;
  int peer = -1;
};

Connection Connect() {
  int fds[2] = {-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {fds[0], fds[1]};
}

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

// Polls the held connections once, without waiting, and takes those that
// spoke.
std::vector<int> Spoken(SilentConnections& silent) {
  std::vector<pollfd> fds;
  silent.AppendPollFds(fds);
  EXPECT_GE(::poll(fds.data(), fds.size(), 0), 0);
  return silent.TakeSpoken(fds.data(), fds.size());
}

TEST(SilentConnectionsTest, HandsOverAConnectionOnceItSpeaks) {
  SilentConnections silent(kTimeout);
  const Connection quiet = Connect();
  const Connection talker = Connect();
  const Clock::time_point now = Clock::now();
  EXPECT_FALSE(silent.Hold(quiet.held, 1000, "quiet", 8, now).has_value());
  EXPECT_FALSE(silent.Hold(talker.held, 1000, "talker", 8, now).has_value());
  EXPECT_TRUE(Spoken(silent).empty());
  ASSERT_EQ(::write(talker.peer, "x", 1), 1);
  EXPECT_EQ(Spoken(silent), std::vector<int>{talker.held});
  EXPECT_EQ(silent.size(), 1u);
  // The caller owns it now.
  EXPECT_TRUE(IsOpen(talker.held));
  ::close(talker.held);
  ::close(talker.peer);
  ::close(quiet.peer);
}

TEST(SilentConnectionsTest, ClosesAConnectionWhosePeerHungUp) {
  SilentConnections silent(kTimeout);
  const Connection gone = Connect();
  silent.Hold(gone.held, 1000, "gone", 8, Clock::now());
  ::close(gone.peer);
  EXPECT_TRUE(Spoken(silent).empty());
  EXPECT_EQ(silent.size(), 0u);
  EXPECT_FALSE(IsOpen(gone.held));
}

TEST(SilentConnectionsTest, ClosesConnectionsPastTheirDeadline) {
  SilentConnections silent(kTimeout);
  const Connection first = Connect();
  const Connection second = Connect();
  const Clock::time_point start = Clock::now();
  silent.Hold(first.held, 1000, "first", 8, start);
  silent.Hold(second.held, 2000, "second", 8, start + std::chrono::milliseconds(500));
  EXPECT_EQ(silent.MillisecondsToNextDeadline(start), 1000);
  EXPECT_TRUE(silent.CloseExpired(start + std::chrono::milliseconds(999)).empty());
  const auto expired = silent.CloseExpired(start + kTimeout);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].peer, "first");
  EXPECT_EQ(expired[0].uid, 1000u);
  EXPECT_FALSE(IsOpen(first.held));
  EXPECT_TRUE(IsOpen(second.held));
  EXPECT_EQ(silent.MillisecondsToNextDeadline(start + kTimeout), 500);
  EXPECT_EQ(silent.MillisecondsToNextDeadline(start + 2 * kTimeout), 0);
  ::close(first.peer);
  ::close(second.peer);
}

TEST(SilentConnectionsTest, ClosesTheOldestToMakeRoom) {
  SilentConnections silent(kTimeout);
  EXPECT_EQ(silent.MillisecondsToNextDeadline(Clock::now()), -1);
  const Connection connections[3] = {Connect(), Connect(), Connect()};
  const Clock::time_point now = Clock::now();
  EXPECT_FALSE(silent.Hold(connections[0].held, 1, "0", 2, now).has_value());
  EXPECT_FALSE(silent.Hold(connections[1].held, 2, "1", 2, now).has_value());
  const auto evicted = silent.Hold(connections[2].held, 3, "2", 2, now);
  ASSERT_TRUE(evicted.has_value());
  EXPECT_EQ(evicted->peer, "0");
  EXPECT_FALSE(IsOpen(connections[0].held));
  EXPECT_EQ(silent.size(), 2u);
  for (const Connection& connection : connections) ::close(connection.peer);
}

}  // namespace
}  // namespace collective::daemon::service
