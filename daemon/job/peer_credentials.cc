#include "daemon/job/peer_credentials.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

// Linux 4.13's; older C libraries do not name it.
#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

namespace collective::daemon::job {
namespace {

std::vector<gid_t> ReadPeerGroups(int fd) {
  std::vector<gid_t> groups(64);
  while (true) {
    socklen_t length = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &length) == 0) {
      groups.resize(length / sizeof(gid_t));
      return groups;
    }
    // ERANGE: the kernel said how much room the list needs.
    if (errno == ERANGE && length / sizeof(gid_t) > groups.size()) {
      groups.resize(length / sizeof(gid_t));
      continue;
    }
    // ENOPROTOOPT: a kernel before 4.13, which cannot say; only the
    // primary gid counts there.
    return {};
  }
}

}  // namespace

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
  return PeerCredentials{credentials.pid, credentials.uid, credentials.gid, ReadPeerGroups(fd)};
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

PeerPolicy::Group NameGroup(gid_t gid) {
  std::vector<char> buffer(4096);
  struct group entry {};
  struct group* found = nullptr;
  while (::getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) == ERANGE) {
    buffer.resize(buffer.size() * 2);
  }
  return {gid, found != nullptr ? std::string(found->gr_name) : absl::StrCat(gid)};
}

PeerPolicy::PeerPolicy(uid_t daemon_uid, std::vector<uint32_t> allowed_uids,
                       std::vector<uint32_t> allowed_gids, Group socket_group)
    : daemon_uid_(daemon_uid),
      allowed_uids_(std::move(allowed_uids)),
      allowed_gids_(std::move(allowed_gids)),
      socket_group_(std::move(socket_group)) {}

bool PeerPolicy::AllowsGroup(gid_t gid) const {
  return gid == socket_group_.gid ||
         std::find(allowed_gids_.begin(), allowed_gids_.end(), gid) != allowed_gids_.end();
}

bool PeerPolicy::Allows(const PeerCredentials& peer) const {
  if (peer.uid == 0 || peer.uid == daemon_uid_) return true;
  if (std::find(allowed_uids_.begin(), allowed_uids_.end(), peer.uid) != allowed_uids_.end()) {
    return true;
  }
  return AllowsGroup(peer.gid) || std::any_of(peer.groups.begin(), peer.groups.end(),
                                              [this](gid_t gid) { return AllowsGroup(gid); });
}

absl::Status PeerPolicy::Refusal(const PeerCredentials& peer) const {
  return absl::PermissionDeniedError(absl::StrCat(
      "collectived refuses ", peer.ToString(), " (groups [", absl::StrJoin(peer.groups, ", "),
      "]): uid ", peer.uid, " is neither root, the daemon's uid (", daemon_uid_,
      ") nor in allowed_uids [", absl::StrJoin(allowed_uids_, ", "),
      "], and none of its groups is the socket's group (", socket_group_.name, ", gid ",
      socket_group_.gid, ") or in allowed_gids [", absl::StrJoin(allowed_gids_, ", "),
      "]. To be admitted, join group '", socket_group_.name, "' (sudo usermod -aG ",
      socket_group_.name, " USER, then log in again) or have the daemon's configuration list uid ",
      peer.uid, " in allowed_uids"));
}

}  // namespace collective::daemon::job
