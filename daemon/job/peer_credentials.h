// Who is on the other end of a Unix-socket connection (SO_PEERCRED), and
// whether the configuration lets them in.
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

  std::string ToString() const;  // "pid 1234 uid 1000 gid 1000"
};

// Reads SO_PEERCRED from a connected Unix socket.
absl::StatusOr<PeerCredentials> ReadPeerCredentials(int fd);

// Whether the process `pid` (as this daemon's pid namespace sees it) has
// exited: no /proc entry, or a zombie its parent has not reaped yet. False
// when it cannot tell (pid 0: a peer in a pid namespace the daemon cannot
// see), so that only a death seen for certain fails a job early.
bool PeerProcessEnded(pid_t pid);

// Root and the daemon's own uid are always allowed; so are the listed uids,
// and peers whose primary gid is listed.
class PeerPolicy {
 public:
  PeerPolicy(uid_t daemon_uid, std::vector<uint32_t> allowed_uids,
             std::vector<uint32_t> allowed_gids);

  bool Allows(const PeerCredentials& peer) const;
  // A PERMISSION_DENIED status that says who was refused and why.
  absl::Status Refusal(const PeerCredentials& peer) const;

 private:
  uid_t daemon_uid_;
  std::vector<uint32_t> allowed_uids_;
  std::vector<uint32_t> allowed_gids_;
};

}  // namespace collective::daemon::job
