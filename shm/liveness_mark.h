// A running daemon's mark in /dev/shm: an empty object named for its uid,
// socket and epoch (SegmentNames::Mark) on which it holds an flock for as
// long as it runs. The kernel drops the lock when the process dies, however
// it dies, so a mark nobody holds names the segments of a daemon that is
// gone. RemoveOrphaned removes those whatever socket they were named for:
// a launcher's private daemon killed together with its launcher leaves a
// socket nobody serves again, where SegmentNames::RemoveStale of a
// successor on the same socket would never find them.
#pragma once

#include <string>

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "shm/segment_names.h"

namespace collective::shm {

class LivenessMark {
 public:
  // Creates the mark of `names`' daemon, locked before anyone can see it.
  static absl::StatusOr<LivenessMark> Hold(const SegmentNames& names);

  LivenessMark(LivenessMark&& other) noexcept;
  LivenessMark& operator=(LivenessMark&& other) noexcept;
  LivenessMark(const LivenessMark&) = delete;
  LivenessMark& operator=(const LivenessMark&) = delete;
  // Removes the mark: the daemon has removed its segments itself.
  ~LivenessMark();

  const std::string& name() const { return name_; }

 private:
  LivenessMark(std::string name, int fd) : name_(std::move(name)), fd_(fd) {}
  void Release();

  std::string name_;
  int fd_ = -1;
};

// Removes the segments of every daemon of `uid` whose mark nobody holds, then
// the mark. Returns how many objects went (marks included).
int RemoveOrphaned(uid_t uid);

}  // namespace collective::shm
