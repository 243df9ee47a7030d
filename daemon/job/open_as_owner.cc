#include "daemon/job/open_as_owner.h"

#include <cerrno>
#include <cstdlib>
#include <vector>

#include <fcntl.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon::job {
namespace {

// setgroups(2) on the calling thread only. glibc's setgroups() changes every
// thread of the process (POSIX semantics), which would briefly hand the
// caller's groups to the engine and the RPC threads; the system call itself
// is per thread, like setfsuid/setfsgid.
bool SetThreadGroups(const std::vector<gid_t>& groups) {
  return ::syscall(SYS_setgroups, groups.size(), groups.data()) == 0;
}

std::vector<gid_t> ThreadGroups() {
  const int count = ::getgroups(0, nullptr);
  std::vector<gid_t> groups(count > 0 ? static_cast<size_t>(count) : 0);
  if (!groups.empty() && ::getgroups(count, groups.data()) != count) groups.clear();
  return groups;
}

// The calling thread's file-system identity switched to `owner` for the
// object's lifetime. setfsuid/setfsgid act on the calling thread only (the
// other threads keep serving), and return the previous value on success and
// the current one on failure, so calling them a second time with the same
// argument says whether the first call took effect.
class FileSystemIdentity {
 public:
  explicit FileSystemIdentity(const PeerCredentials& owner) : saved_groups_(ThreadGroups()) {
    // The daemon's supplementary groups would otherwise still count in
    // permission checks, granting the caller what only those groups may do.
    groups_dropped_ = SetThreadGroups({});
    saved_fsgid_ = static_cast<gid_t>(::setfsgid(owner.gid));
    saved_fsuid_ = static_cast<uid_t>(::setfsuid(owner.uid));
    const bool gid_taken = static_cast<gid_t>(::setfsgid(owner.gid)) == owner.gid;
    const bool uid_taken = static_cast<uid_t>(::setfsuid(owner.uid)) == owner.uid;
    taken_ = groups_dropped_ && gid_taken && uid_taken;
  }

  ~FileSystemIdentity() {
    if (!Restore()) {
      // Cannot happen for a daemon that could switch (returning to its own
      // ids needs no privilege); if it does, this thread must not go on
      // serving with the caller's identity.
      log::Daemon().critical("cannot restore the file-system identity of a daemon thread");
      std::abort();
    }
  }

  FileSystemIdentity(const FileSystemIdentity&) = delete;
  FileSystemIdentity& operator=(const FileSystemIdentity&) = delete;

  bool taken() const { return taken_; }

  // Back to the daemon's own identity; true when it took effect.
  bool Restore() {
    if (restored_) return true;
    ::setfsuid(saved_fsuid_);
    ::setfsgid(saved_fsgid_);
    const bool ids_back = static_cast<uid_t>(::setfsuid(saved_fsuid_)) == saved_fsuid_ &&
                          static_cast<gid_t>(::setfsgid(saved_fsgid_)) == saved_fsgid_;
    const bool groups_back = !groups_dropped_ || SetThreadGroups(saved_groups_);
    restored_ = ids_back && groups_back;
    return restored_;
  }

 private:
  std::vector<gid_t> saved_groups_;
  bool groups_dropped_ = false;
  uid_t saved_fsuid_ = 0;
  gid_t saved_fsgid_ = 0;
  bool taken_ = false;
  bool restored_ = false;
};

absl::Status OpenError(int error, const std::string& path, const PeerCredentials& owner) {
  const std::string what =
      absl::StrCat("cannot open ", path, " for writing as uid ", owner.uid, " gid ", owner.gid);
  if (error == ELOOP) {
    return absl::InvalidArgumentError(absl::StrCat(
        what,
        ": it is a symbolic link (refused; give the path of the file itself) or its path "
        "loops"));
  }
  if (error == ENXIO) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": it is a FIFO or socket, not a file"));
  }
  return absl::ErrnoToStatus(error, what);
}

}  // namespace

absl::StatusOr<int> OpenForWritingAs(const std::string& path, const PeerCredentials& owner) {
  int fd = -1;
  int error = 0;
  {
    FileSystemIdentity identity(owner);
    const uid_t daemon_uid = ::geteuid();
    if (!identity.taken()) {
      if (owner.uid != daemon_uid) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot create ", path, " as uid ", owner.uid, " gid ", owner.gid,
                         ": collectived runs as uid ", daemon_uid,
                         " without the capabilities to take another user's file-system identity "
                         "(CAP_SETUID, CAP_SETGID), so it only writes files for uid ",
                         daemon_uid));
      }
      // The daemon's own user: its own identity is the caller's.
      identity.Restore();
    }
    // O_NONBLOCK: opening a FIFO without a reader fails (ENXIO) instead of
    // blocking this thread until someone reads it.
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                0644);
    error = errno;
  }
  if (fd < 0) return OpenError(error, path, owner);

  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    error = errno;
    ::close(fd);
    return absl::ErrnoToStatus(error, absl::StrCat("cannot stat ", path));
  }
  if (!S_ISREG(status.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write to ", path, ": it is not a regular file"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

}  // namespace collective::daemon::job
