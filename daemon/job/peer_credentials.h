// Who is on the other end of a Unix-socket connection (SO_PEERCRED and
// SO_PEERGROUPS), and whether the configuration lets them in.
#pragma once

#include <string>
#include <vector>

#include <sys/types.h>

#include "absl/status/statusor.h"

namespace collective::daemon::job {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // Supplementary groups as the peer held them when it connected (may or
  // may not repeat `gid`); empty when the kernel could not say.
  std::vector<gid_t> groups;

  std::string ToString() const;  // "pid 1234 uid 1000 gid 1000"
};

// Reads SO_PEERCRED and the peer's supplementary groups from a connected
// Unix socket. The groups come from SO_PEERGROUPS (Linux 4.13 and later):
// the credentials the peer held at connect(), recorded by the kernel with
// SO_PEERCRED's, so a pid reused since, a /proc hidden by hidepid= or a peer
// in another pid namespace cannot mislead it (as /proc/<pid>/status could),
// and no user database (NSS, LDAP) is asked from the accept loop, as
// getgrouplist(3) would, which would also miss a process that dropped or
// gained groups. Older kernels cannot say: no groups, only the primary gid.
absl::StatusOr<PeerCredentials> ReadPeerCredentials(int fd);

// Whether the process `pid` (as this daemon's pid namespace sees it) has
// exited: no /proc entry, or a zombie its parent has not reaped yet. False
// when it cannot tell (pid 0: a peer in a pid namespace the daemon cannot
// see), so that only a death seen for certain fails a job early.
bool PeerProcessEnded(pid_t pid);

// Root and the daemon's own uid are always allowed; so are the listed uids,
// and peers of which the primary gid or one of the supplementary groups is
// the socket's group or one of the listed gids. The socket's group is the
// one whose members the socket file (mode 0660) lets connect: being put in
// it is how an operator gives a user the daemon.
class PeerPolicy {
 public:
  struct Group {
    gid_t gid = 0;
    std::string name;  // for messages; the number when it has no name
  };

  PeerPolicy(uid_t daemon_uid, std::vector<uint32_t> allowed_uids,
             std::vector<uint32_t> allowed_gids, Group socket_group);

  bool Allows(const PeerCredentials& peer) const;
  // A PERMISSION_DENIED status that says who was refused, why, and how to be
  // admitted.
  absl::Status Refusal(const PeerCredentials& peer) const;

 private:
  bool AllowsGroup(gid_t gid) const;

  uid_t daemon_uid_;
  std::vector<uint32_t> allowed_uids_;
  std::vector<uint32_t> allowed_gids_;
  Group socket_group_;
};

// The group `gid` with its name from the group database (the number if it
// has none).
PeerPolicy::Group NameGroup(gid_t gid);

}  // namespace collective::daemon::job
