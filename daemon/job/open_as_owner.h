// Creating a file on behalf of an RPC's caller, with the caller's file-system
// identity, so that a caller cannot make the daemon (often root) write where
// the caller could not write itself.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "daemon/job/peer_credentials.h"

namespace collective::daemon::job {

// Creates or truncates the regular file at the absolute `path` for writing
// (mode 0644 less the umask, close-on-exec, a symbolic link as the last
// component refused) while the calling thread holds `owner`'s uid and primary
// gid as its file-system ids and no supplementary groups, then restores the
// thread's own. A new file belongs to `owner`. Returns the descriptor.
//
// PERMISSION_DENIED when the daemon cannot take `owner`'s identity (it lacks
// CAP_SETUID/CAP_SETGID) and `owner` is another user than the daemon's; the
// open error, naming the path, otherwise.
absl::StatusOr<int> OpenForWritingAs(const std::string& path, const PeerCredentials& owner);

}  // namespace collective::daemon::job
