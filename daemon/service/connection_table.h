// The connections the accept loop has handed to gRPC, counted per uid, so
// that one local user cannot take every descriptor the daemon has. gRPC
// closes a connection without telling us; an entry is known to be gone when
// its descriptor is closed or now names another socket (a different inode).
// Touched only by the accept-loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <sys/types.h>

namespace collective::daemon::service {

class ConnectionTable {
 public:
  // Records a connection of `uid` on descriptor `fd` (still open).
  void Add(int fd, uid_t uid);
  // How many recorded connections of `uid` are still open; forgets those
  // that are not.
  size_t OpenOf(uid_t uid);

 private:
  struct Entry {
    int fd;
    uid_t uid;
    ino_t inode;
  };
  // Drops entries whose descriptor gRPC has closed.
  void Prune();

  std::vector<Entry> entries_;
};

// How many connections one uid other than root and the daemon's own may hold:
// a quarter of the daemon's descriptor limit (RLIMIT_NOFILE, read at each
// call, so that a limit raised at run time counts), and at least
// `kMinConnectionsPerUid`. A quarter leaves the rest to other users and to
// the daemon's own files (segments, the metrics listener). A constant, not a
// knob: it follows the descriptor limit, which is the setting that matters.
inline constexpr size_t kMinConnectionsPerUid = 16;
size_t ConnectionsPerUidLimit();

}  // namespace collective::daemon::service
