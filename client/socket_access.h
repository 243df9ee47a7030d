// Whether this process may connect to the daemon's socket, and if not, what
// its user must do to be let in. Connecting to a Unix socket takes write
// permission on the file: the socket is mode 0660, so only its owner (the
// daemon's user), its group's members and root get past the file system to
// the daemon's own policy. Without this check a user outside the group sees
// gRPC's "Permission denied" once the connect timeout has passed.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace collective::internal {

// PERMISSION_DENIED naming the socket's group and how to join it when the
// socket exists and this process may not write it; OK otherwise (no socket
// yet: the daemon may still be starting).
absl::Status CheckSocketAccess(const std::string& socket_path);

}  // namespace collective::internal
