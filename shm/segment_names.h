// Names of the daemon's shared-memory objects. Every name carries the
// daemon's uid and a tag derived from its socket path, so that a daemon can
// remove what a crashed predecessor on the same socket left behind without
// touching the segments of another daemon; the epoch (a random number per
// daemon start) keeps a new instance's names apart from the old ones. Each
// running daemon also holds a mark named for its epoch (see liveness_mark.h),
// by which any later daemon of the uid finds what a dead one left.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <sys/types.h>

#include "absl/strings/string_view.h"

namespace collective::shm {

class SegmentNames {
 public:
  SegmentNames(uid_t daemon_uid, absl::string_view socket_path, uint64_t epoch);

  std::string Client(uint64_t client_id) const;
  // What every name of this daemon uid and socket starts with.
  const std::string& prefix() const { return prefix_; }
  std::string Result(uint64_t job_sequence) const;
  std::string Doorbell(uint64_t job_sequence) const;
  // The name of this daemon's liveness mark. It does not start with
  // prefix(): a mark is no segment.
  std::string Mark() const;
  // What the marks of every daemon of `uid` start with.
  static std::string MarkPrefix(uid_t uid);
  // What the segments of the daemon whose mark is `mark` (of `uid`) start
  // with; empty when `mark` is no mark's name.
  static std::string SegmentsOfMark(uid_t uid, absl::string_view mark);

  // Removes every object (segment or mark) named for this uid and socket
  // whose epoch is not ours. Call only while holding the socket's lock.
  // Returns how many went.
  int RemoveStale() const;
  // Removes every object named for this uid and socket, whatever its epoch:
  // what a daemon on it that is gone for good left (nobody serves the socket
  // any more). Returns how many went.
  int RemoveAll() const;

 private:
  // Removes the objects with our prefix, but ours when `keep_ours` (those of
  // our epoch); how many went.
  int Remove(bool keep_ours) const;

  std::string prefix_;       // "collectived.<uid>.<socket tag>."
  std::string mark_prefix_;  // "collectived.alive.<uid>.<socket tag>."
  std::string epoch_;        // 16 hex digits
};

// The names of the objects in /dev/shm (where glibc keeps POSIX shared
// memory) that start with `prefix`.
std::vector<std::string> ShmObjectsStartingWith(absl::string_view prefix);

// Removes the object `name` ("collectived...."), saying in the log whose it
// was (`whose`: "an earlier daemon"); whether it went.
bool RemoveShmObject(const std::string& name, absl::string_view whose);

}  // namespace collective::shm
