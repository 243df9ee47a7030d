#include "daemon/observe/journal_stream.h"

#include <cstdlib>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace collective::daemon::observe {

bool StreamIsJournal(const char* journal_stream, int fd) {
  if (journal_stream == nullptr) return false;
  const std::vector<absl::string_view> parts = absl::StrSplit(journal_stream, ':');
  uint64_t device = 0;
  uint64_t inode = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &device) ||
      !absl::SimpleAtoi(parts[1], &inode)) {
    return false;
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) return false;
  return static_cast<uint64_t>(info.st_dev) == device &&
         static_cast<uint64_t>(info.st_ino) == inode;
}

bool UsePriorityPrefix(config::LogPriorityPrefix setting) {
  switch (setting) {
    case config::LogPriorityPrefix::kAlways:
      return true;
    case config::LogPriorityPrefix::kNever:
      return false;
    case config::LogPriorityPrefix::kAuto:
      break;
  }
  return StreamIsJournal(std::getenv("JOURNAL_STREAM"), STDERR_FILENO);
}

}  // namespace collective::daemon::observe
