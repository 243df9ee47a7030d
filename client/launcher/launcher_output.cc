#include "client/launcher/launcher_output.h"

#include <cerrno>

#include <poll.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace collective::launcher {

bool WriteAll(int fd, absl::string_view text) {
  while (!text.empty()) {
    const ssize_t written = ::write(fd, text.data(), text.size());
    if (written >= 0) {
      text.remove_prefix(static_cast<size_t>(written));
    } else if (errno == EAGAIN) {
      // Someone made our stdout non-blocking (it is shared with the shell):
      // wait for room rather than lose the line.
      pollfd room{fd, POLLOUT, 0};
      ::poll(&room, 1, -1);
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

void Say(absl::string_view message) {
  WriteAll(STDERR_FILENO, absl::StrCat("collectiverun: ", message, "\n"));
}

}  // namespace collective::launcher
