#include "daemon/observe/systemd_notify.h"

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon::observe {
namespace {

// A notification is newline-separated assignments, so a status must be one
// line; `systemctl status` shows one line anyway.
constexpr size_t kMaxStatusBytes = 240;

std::string OneLine(absl::string_view text) {
  std::string line(text.substr(0, kMaxStatusBytes));
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (text.size() > kMaxStatusBytes) line += "...";
  return line;
}

// sd_notify(3)'s protocol, without waiting: libsystemd's sd_notify blocks
// while the receiver's queue is full, so a supervisor that stopped reading
// (collectiverun did, once its daemon was ready) held the engine thread, and
// with it every registration and SIGTERM's shutdown, for ever. A
// notification the receiver has no room for is dropped; the next one
// describes the state anyway. NOTIFY_SOCKET is systemd's variable, not a
// knob of ours: a path, or '@' for the abstract namespace.
void Notify(absl::string_view assignments, absl::string_view status) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr) return;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const size_t length = std::strlen(path);
  if ((path[0] != '/' && path[0] != '@') || length < 2 || length >= sizeof(address.sun_path)) {
    return;
  }
  std::memcpy(address.sun_path, path, length);
  if (path[0] == '@') address.sun_path[0] = '\0';
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return;
  const std::string message = status.empty()
                                  ? std::string(assignments)
                                  : absl::StrCat(assignments, "STATUS=", OneLine(status));
  if (::sendto(fd, message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&address),
               static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length)) < 0) {
    log::Daemon().debug("a notification to {} was not sent: {}", path, std::strerror(errno));
  }
  ::close(fd);
}

// Counted by hand rather than through Job::MissingLocalRanks, which
// allocates: Observe runs on every turn of the engine's loop.
int32_t CountRegistered(const job::Job& job) {
  int32_t registered = 0;
  for (const auto& member : job.members()) registered += member ? 1 : 0;
  return registered;
}

int32_t CountAttached(const job::Job& job) {
  int32_t attached = 0;
  for (const auto& member : job.members()) {
    if (member && member->attached() && member->live()) ++attached;
  }
  return attached;
}

std::string Clients(int32_t count) {
  return absl::StrCat(count, count == 1 ? " client" : " clients");
}

}  // namespace

void NotifyReady(absl::string_view status) { Notify("READY=1\n", status); }

void NotifyStatus(absl::string_view status) { Notify("", status); }

void NotifyStopping(absl::string_view status) { Notify("STOPPING=1\n", status); }

void NotifyWatchdog() { Notify("WATCHDOG=1", ""); }

std::string DescribeForSystemd(const job::Job* job, absl::string_view socket) {
  if (job == nullptr) return absl::StrCat("idle, serving ", socket);
  const std::string name = absl::StrCat("job '", job->id(), "'");
  switch (job->state()) {
    case job::JobState::kForming:
      return absl::StrCat(name, " forming: ", CountRegistered(*job), " of ", job->local_size(),
                          " local ranks registered");
    case job::JobState::kRunning:
      return absl::StrCat(name, " running with ", Clients(CountAttached(*job)));
    case job::JobState::kEnding:
      return absl::StrCat(name, " ending (a rank left), ", Clients(CountAttached(*job)),
                          " still attached");
    case job::JobState::kFailed:
      return absl::StrCat(name, " failed, ", Clients(CountAttached(*job)),
                          " still attached: ", job->failure().message());
  }
  return name;
}

void JobStatusNotifier::Observe(const job::Job* job) {
  Seen now;
  if (job != nullptr) {
    now.job_sequence = job->sequence();
    now.state = job->state();
    now.registered = CountRegistered(*job);
    now.attached = CountAttached(*job);
  }
  if (now == seen_) return;
  seen_ = now;
  NotifyStatus(DescribeForSystemd(job, socket_));
}

}  // namespace collective::daemon::observe
