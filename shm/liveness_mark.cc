#include "shm/liveness_mark.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace collective::shm {
namespace {

// glibc implements POSIX shared memory as files in /dev/shm; an flock needs
// the file itself.
constexpr char kShmDirectory[] = "/dev/shm/";

std::string PathOf(absl::string_view name) { return absl::StrCat(kShmDirectory, name); }

// Whether `fd`, which we hold locked, is still the object named `name`: a
// mark removed and made again under the same name belongs to someone else.
bool StillNamed(int fd, const std::string& name) {
  struct stat held {};
  struct stat named {};
  return ::fstat(fd, &held) == 0 && ::stat(PathOf(name).c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

}  // namespace

absl::StatusOr<LivenessMark> LivenessMark::Hold(const SegmentNames& names) {
  // Locked under a name no scan takes for a mark, then renamed: a mark is
  // never seen unlocked while its daemon lives.
  const std::string name = names.Mark();
  const std::string unlocked = PathOf(absl::StrCat(name, ".new"));
  const int fd = ::open(unlocked.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create the liveness mark ", unlocked, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 ||
      ::rename(unlocked.c_str(), PathOf(name).c_str()) != 0) {
    const int error = errno;
    ::unlink(unlocked.c_str());
    ::close(fd);
    return absl::InternalError(
        absl::StrCat("cannot hold the liveness mark ", PathOf(name), ": ", std::strerror(error)));
  }
  return LivenessMark(name, fd);
}

LivenessMark::LivenessMark(LivenessMark&& other) noexcept
    : name_(std::move(other.name_)), fd_(std::exchange(other.fd_, -1)) {}

LivenessMark& LivenessMark::operator=(LivenessMark&& other) noexcept {
  if (this != &other) {
    Release();
    name_ = std::move(other.name_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

LivenessMark::~LivenessMark() { Release(); }

void LivenessMark::Release() {
  if (fd_ < 0) return;
  ::unlink(PathOf(name_).c_str());
  ::close(fd_);
  fd_ = -1;
}

int RemoveOrphaned(uid_t uid) {
  int removed = 0;
  for (const std::string& mark : ShmObjectsStartingWith(SegmentNames::MarkPrefix(uid))) {
    const std::string segments = SegmentNames::SegmentsOfMark(uid, mark);
    if (segments.empty()) continue;  // not a mark (one being made ends in ".new")
    const int fd = ::open(PathOf(mark).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    // Held: its daemon runs. Gone meanwhile, or made again: not ours to judge.
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || !StillNamed(fd, mark)) {
      ::close(fd);
      continue;
    }
    for (const std::string& name : ShmObjectsStartingWith(segments)) {
      if (RemoveShmObject(name, "a daemon that is gone")) ++removed;
    }
    if (RemoveShmObject(mark, "a daemon that is gone")) ++removed;
    ::close(fd);
  }
  return removed;
}

}  // namespace collective::shm
