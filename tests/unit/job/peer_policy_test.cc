// PeerPolicy: who is admitted (root, the daemon's uid, allowed_uids, and
// peers whose primary or supplementary groups include the socket's group or
// an allowed gid), what a refusal says; ReadPeerCredentials' groups.
#include <algorithm>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/job/peer_credentials.h"

namespace collective::daemon::job {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

constexpr uid_t kDaemonUid = 998;
const PeerPolicy::Group kSocketGroup{.gid = 998, .name = "collectived"};

PeerCredentials Peer(uid_t uid, gid_t gid, std::vector<gid_t> groups = {}) {
  return {.pid = 42, .uid = uid, .gid = gid, .groups = std::move(groups)};
}

TEST(PeerPolicyTest, AdmitsRootTheDaemonAndListedUids) {
  const PeerPolicy policy(kDaemonUid, {1001}, {}, kSocketGroup);
  EXPECT_TRUE(policy.Allows(Peer(0, 0)));
  EXPECT_TRUE(policy.Allows(Peer(kDaemonUid, 5)));
  EXPECT_TRUE(policy.Allows(Peer(1001, 1001)));
  EXPECT_FALSE(policy.Allows(Peer(1002, 1002)));
}

TEST(PeerPolicyTest, AdmitsTheSocketGroupAndAllowedGidsByPrimaryOrSupplementaryGroup) {
  const PeerPolicy policy(kDaemonUid, {}, {2000}, kSocketGroup);
  EXPECT_TRUE(policy.Allows(Peer(1000, 998)));
  EXPECT_TRUE(policy.Allows(Peer(1000, 1000, {27, 998})));
  EXPECT_TRUE(policy.Allows(Peer(1000, 2000)));
  EXPECT_TRUE(policy.Allows(Peer(1000, 1000, {2000})));
  EXPECT_FALSE(policy.Allows(Peer(1000, 1000, {27, 100})));
}

TEST(PeerPolicyTest, ARefusalSaysWhyAndHowToBeAdmitted) {
  const PeerPolicy policy(kDaemonUid, {1001}, {2000}, kSocketGroup);
  const absl::Status refusal = policy.Refusal(Peer(1000, 1000, {27, 100}));
  EXPECT_EQ(refusal.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(refusal.message(),
            "collectived refuses pid 42 uid 1000 gid 1000 (groups [27, 100]): uid 1000 is neither "
            "root, the daemon's uid (998) nor in allowed_uids [1001], and none of its groups is "
            "the socket's group (collectived, gid 998) or in allowed_gids [2000]. To be admitted, "
            "join group 'collectived' (sudo usermod -aG collectived USER, then log in again) or "
            "have the daemon's configuration list uid 1000 in allowed_uids");
}

TEST(PeerPolicyTest, NamesAGroupOrFallsBackToItsNumber) {
  EXPECT_EQ(NameGroup(0).name, "root");
  EXPECT_EQ(NameGroup(4242424).name, "4242424");
}

// A socket pair's peer is this process: the kernel reports its groups.
TEST(ReadPeerCredentialsTest, ReadsThePeersSupplementaryGroups) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  auto peer = ReadPeerCredentials(fds[0]);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->pid, ::getpid());
  EXPECT_EQ(peer->uid, ::geteuid());
  std::vector<gid_t> mine(static_cast<size_t>(::getgroups(0, nullptr)));
  ASSERT_EQ(::getgroups(static_cast<int>(mine.size()), mine.data()), static_cast<int>(mine.size()));
  EXPECT_THAT(peer->groups, UnorderedElementsAreArray(mine));
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace collective::daemon::job
