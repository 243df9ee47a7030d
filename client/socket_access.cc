#include "client/socket_access.h"

#include <cerrno>
#include <string>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace collective::internal {
namespace {

std::string GroupName(gid_t gid) {
  std::vector<char> buffer(4096);
  struct group entry {};
  struct group* found = nullptr;
  while (::getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) == ERANGE) {
    buffer.resize(buffer.size() * 2);
  }
  return found != nullptr ? std::string(found->gr_name) : absl::StrCat(gid);
}

}  // namespace

absl::Status CheckSocketAccess(const std::string& socket_path) {
  // The effective ids, as connect(2) checks them.
  if (::faccessat(AT_FDCWD, socket_path.c_str(), W_OK, AT_EACCESS) == 0 || errno != EACCES) {
    return absl::OkStatus();
  }
  struct stat info {};
  if (::stat(socket_path.c_str(), &info) != 0) {
    // The directory itself is closed to us.
    return absl::PermissionDeniedError(absl::StrCat(
        "uid ", ::geteuid(), " may not reach collectived's socket ", socket_path,
        ": a directory on its path does not let this user in (ask the daemon's operator)"));
  }
  const std::string group = GroupName(info.st_gid);
  return absl::PermissionDeniedError(absl::StrCat(
      "uid ", ::geteuid(), " may not connect to collectived's socket ", socket_path, " (mode ",
      absl::StrFormat("%04o", info.st_mode & 07777), "): only its owner and members of its group '",
      group, "' may. To be admitted, join the group (sudo usermod -aG ", group,
      " USER, then log in again, or run newgrp ", group, ")"));
}

}  // namespace collective::internal
