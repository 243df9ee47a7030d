// PeerProcessEnded: a death is seen whether or not the parent has reaped
// the process yet, and nothing is claimed about a pid the daemon cannot see.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "daemon/job/peer_credentials.h"

namespace collective::daemon::job {
namespace {

TEST(PeerProcessEndedTest, ALiveProcessHasNotEnded) {
  EXPECT_FALSE(PeerProcessEnded(::getpid()));
  EXPECT_FALSE(PeerProcessEnded(::getppid()));
}

TEST(PeerProcessEndedTest, AnUnknownPidIsNotCalledEnded) {
  EXPECT_FALSE(PeerProcessEnded(0));
  EXPECT_FALSE(PeerProcessEnded(-1));
}

TEST(PeerProcessEndedTest, AnExitedChildHasEndedBeforeAndAfterItIsReaped) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  // Unreaped, it is a zombie: ended. waitid with WNOWAIT waits for the
  // exit without reaping, so this is no sleep.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_TRUE(PeerProcessEnded(child));
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(PeerProcessEnded(child));
}

}  // namespace
}  // namespace collective::daemon::job
