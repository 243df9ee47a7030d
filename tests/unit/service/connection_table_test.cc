// ConnectionTable: connections counted per uid until their descriptor is
// closed or reused, and the per-uid share of the descriptor limit.
#include "daemon/service/connection_table.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace collective::daemon::service {
namespace {

struct SocketPair {
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0); }
  ~SocketPair() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  void CloseFirst() {
    ::close(fds[0]);
    fds[0] = -1;
  }
  int fds[2] = {-1, -1};
};

TEST(ConnectionTableTest, CountsOpenConnectionsPerUid) {
  ConnectionTable table;
  SocketPair a;
  SocketPair b;
  table.Add(a.fds[0], 1000);
  table.Add(a.fds[1], 1000);
  table.Add(b.fds[0], 2000);
  EXPECT_EQ(table.OpenOf(1000), 2u);
  EXPECT_EQ(table.OpenOf(2000), 1u);
  EXPECT_EQ(table.OpenOf(3000), 0u);
  a.CloseFirst();
  EXPECT_EQ(table.OpenOf(1000), 1u);
}

TEST(ConnectionTableTest, ForgetsAConnectionWhoseDescriptorNowNamesAnotherSocket) {
  ConnectionTable table;
  SocketPair first;
  const int fd = first.fds[0];
  table.Add(fd, 1000);
  first.CloseFirst();
  // The lowest free number: the one just closed, now another connection's.
  SocketPair second;
  ASSERT_EQ(second.fds[0], fd);
  EXPECT_EQ(table.OpenOf(1000), 0u);
  table.Add(second.fds[0], 2000);
  EXPECT_EQ(table.OpenOf(2000), 1u);
  EXPECT_EQ(table.OpenOf(1000), 0u);
}

TEST(ConnectionTableTest, ShareIsAQuarterOfTheDescriptorLimit) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit lowered = saved;
  lowered.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  EXPECT_EQ(ConnectionsPerUidLimit(), 64u);
  lowered.rlim_cur = 32;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  EXPECT_EQ(ConnectionsPerUidLimit(), kMinConnectionsPerUid);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
}

}  // namespace
}  // namespace collective::daemon::service
