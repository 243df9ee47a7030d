#include "daemon/job/peer_credentials.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace collective::daemon::job {

std::string PeerCredentials::ToString() const {
  return absl::StrCat("pid ", pid, " uid ", uid, " gid ", gid);
}

absl::StatusOr<PeerCredentials> ReadPeerCredentials(int fd) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot read peer credentials of socket ", fd, ": ", std::strerror(errno)));
  }
  return PeerCredentials{credentials.pid, credentials.uid, credentials.gid};
}

bool PeerProcessEnded(pid_t pid) {
  if (pid <= 0) return false;
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  char buffer[512];
  const ssize_t got = ::read(fd, buffer, sizeof(buffer) - 1);
  ::close(fd);
  if (got <= 0) return false;
  // "pid (comm) state ...": comm may hold spaces and parentheses, so the
  // state follows the last ')'.
  const std::string_view line(buffer, static_cast<size_t>(got));
  const size_t close = line.rfind(')');
  if (close == std::string_view::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

PeerPolicy::PeerPolicy(uid_t daemon_uid, std::vector<uint32_t> allowed_uids,
                       std::vector<uint32_t> allowed_gids)
    : daemon_uid_(daemon_uid),
      allowed_uids_(std::move(allowed_uids)),
      allowed_gids_(std::move(allowed_gids)) {}

bool PeerPolicy::Allows(const PeerCredentials& peer) const {
  if (peer.uid == 0 || peer.uid == daemon_uid_) return true;
  return std::find(allowed_uids_.begin(), allowed_uids_.end(), peer.uid) != allowed_uids_.end() ||
         std::find(allowed_gids_.begin(), allowed_gids_.end(), peer.gid) != allowed_gids_.end();
}

absl::Status PeerPolicy::Refusal(const PeerCredentials& peer) const {
  return absl::PermissionDeniedError(
      absl::StrCat("collectived refuses ", peer.ToString(), ": uid ", peer.uid,
                   " is neither root, the daemon's uid (", daemon_uid_, ") nor in allowed_uids [",
                   absl::StrJoin(allowed_uids_, ", "), "], and gid ", peer.gid,
                   " is not in allowed_gids [", absl::StrJoin(allowed_gids_, ", "), "]"));
}

}  // namespace collective::daemon::job
