// Watchdog: the interval systemd's variables ask for, and WATCHDOG=1 sent on
// the first tick and then every half interval, to a real NOTIFY_SOCKET.
#include "daemon/observe/watchdog.h"

#include <cstdlib>
#include <string>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/common/temporary_directory.h"

namespace collective::daemon::observe {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(WatchdogIntervalTest, FollowsSystemdsVariables) {
  EXPECT_EQ(Watchdog::IntervalFrom("30000000", nullptr, 7), microseconds(30000000));
  EXPECT_EQ(Watchdog::IntervalFrom("30000000", "7", 7), microseconds(30000000));
  EXPECT_EQ(Watchdog::IntervalFrom("30000000", "", 7), microseconds(30000000));
  // Meant for another process (the daemon's parent, say).
  EXPECT_EQ(Watchdog::IntervalFrom("30000000", "8", 7), std::nullopt);
  EXPECT_EQ(Watchdog::IntervalFrom(nullptr, nullptr, 7), std::nullopt);
  EXPECT_EQ(Watchdog::IntervalFrom("0", nullptr, 7), std::nullopt);
  EXPECT_EQ(Watchdog::IntervalFrom("soon", nullptr, 7), std::nullopt);
}

TEST(WatchdogTest, DisabledNeverComesDue) {
  Watchdog watchdog(std::nullopt);
  EXPECT_FALSE(watchdog.enabled());
  EXPECT_EQ(watchdog.next_due(), Watchdog::Clock::time_point::max());
}

// A datagram socket standing in for systemd's notification socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path.copy(address.sun_path, sizeof(address.sun_path) - 1);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  }
  ~NotifySocket() {
    ::unsetenv("NOTIFY_SOCKET");
    ::close(fd_);
  }
  // The next datagram, or "" if none is waiting.
  std::string Take() const {
    pollfd readable = {fd_, POLLIN, 0};
    if (::poll(&readable, 1, 0) <= 0) return "";
    char buffer[512];
    const ssize_t got = ::recv(fd_, buffer, sizeof(buffer), 0);
    return got > 0 ? std::string(buffer, static_cast<size_t>(got)) : "";
  }

 private:
  std::string path_;
  int fd_ = -1;
};

TEST(WatchdogTest, PingsOnTheFirstTickThenEveryHalfInterval) {
  testing::TemporaryDirectory directory;
  NotifySocket systemd(directory.path() + "/notify");
  Watchdog watchdog(microseconds(10'000'000));
  ASSERT_TRUE(watchdog.enabled());
  EXPECT_EQ(watchdog.period(), milliseconds(5000));

  const Watchdog::Clock::time_point start = Watchdog::Clock::now();
  watchdog.Tick(start);
  EXPECT_EQ(systemd.Take(), "WATCHDOG=1");
  EXPECT_EQ(watchdog.next_due(), start + milliseconds(5000));
  watchdog.Tick(start + milliseconds(4999));
  EXPECT_EQ(systemd.Take(), "");
  watchdog.Tick(start + milliseconds(5000));
  EXPECT_EQ(systemd.Take(), "WATCHDOG=1");
  EXPECT_EQ(systemd.Take(), "");
}

}  // namespace
}  // namespace collective::daemon::observe
