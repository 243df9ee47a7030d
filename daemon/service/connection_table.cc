#include "daemon/service/connection_table.h"

#include <algorithm>

#include <sys/resource.h>
#include <sys/stat.h>

namespace collective::daemon::service {
namespace {

// The inode of the socket open on `fd`, or 0 if `fd` is not open.
ino_t InodeOf(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) return 0;
  return info.st_ino;
}

}  // namespace

void ConnectionTable::Add(int fd, uid_t uid) {
  // A descriptor number is reused once gRPC closes it: the entry for the old
  // connection on it is stale by now.
  std::erase_if(entries_, [fd](const Entry& entry) { return entry.fd == fd; });
  entries_.push_back({fd, uid, InodeOf(fd)});
}

size_t ConnectionTable::OpenOf(uid_t uid) {
  Prune();
  return static_cast<size_t>(std::count_if(entries_.begin(), entries_.end(),
                                           [uid](const Entry& entry) { return entry.uid == uid; }));
}

void ConnectionTable::Prune() {
  std::erase_if(entries_, [](const Entry& entry) {
    const ino_t inode = InodeOf(entry.fd);
    return inode == 0 || inode != entry.inode;
  });
}

size_t ConnectionsPerUidLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return SIZE_MAX;
  }
  return std::max(kMinConnectionsPerUid, static_cast<size_t>(limit.rlim_cur / 4));
}

}  // namespace collective::daemon::service
