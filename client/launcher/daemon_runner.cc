#include "client/launcher/daemon_runner.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/launcher/launcher_output.h"
#include "shm/segment_names.h"

namespace collective::launcher {
namespace {

constexpr absl::Duration kStartTimeout = absl::Seconds(30);
constexpr absl::Duration kStopTimeout = absl::Seconds(10);
constexpr char kSocketName[] = "/collectived.sock";
// The longest socket directory: sun_path holds 108 bytes.
constexpr size_t kMaxDirectoryBytes = sizeof(sockaddr_un::sun_path) - sizeof(kSocketName) - 8;

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", path, "' must have 1 to ",
                                                   sizeof(address.sun_path) - 1, " bytes"));
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

absl::StatusOr<std::string> MakeDirectory(const Environment& environment) {
  std::string base = "/tmp";
  if (const auto it = environment.find("TMPDIR");
      it != environment.end() && absl::StartsWith(it->second, "/") &&
      it->second.size() + sizeof("/collectiverun-XXXXXX") < kMaxDirectoryBytes) {
    base = it->second;
  }
  std::string pattern = base + "/collectiverun-XXXXXX";
  // mkdtemp makes it 0700: only this user reaches the socket.
  if (::mkdtemp(pattern.data()) == nullptr) return Errno(absl::StrCat("mkdtemp ", pattern));
  return pattern;
}

// A datagram socket for sd_notify(3) messages, in the private directory.
absl::StatusOr<UniqueFd> BindNotifySocket(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return Errno("socket");
  auto address = UnixAddress(path);
  if (!address.ok()) return address.status();
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) != 0) {
    return Errno(absl::StrCat("bind ", path));
  }
  return fd;
}

// Reads every pending notification; true if one of them says READY=1.
bool ReadReady(int fd) {
  bool ready = false;
  char buffer[4096];
  ssize_t got;
  while ((got = ::recv(fd, buffer, sizeof(buffer), 0)) > 0 || (got < 0 && errno == EINTR)) {
    if (got < 0) continue;
    for (absl::string_view line :
         absl::StrSplit(absl::string_view(buffer, static_cast<size_t>(got)), '\n')) {
      if (line == "READY=1") ready = true;
    }
  }
  return ready;
}

// Next to collectiverun (an install or a build tree keeps them together),
// else whatever PATH finds.
std::string DefaultBinary() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::string sibling = (self.parent_path() / "collectived").string();
    if (::access(sibling.c_str(), X_OK) == 0) return sibling;
  }
  return "collectived";
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrivateDaemon>> PrivateDaemon::Start(
    const PrivateDaemonOptions& options, const Environment& environment,
    const SignalWatcher& signals) {
  auto daemon = std::unique_ptr<PrivateDaemon>(new PrivateDaemon());
  auto directory = MakeDirectory(environment);
  if (!directory.ok()) return directory.status();
  daemon->directory_ = *directory;
  daemon->socket_ = daemon->directory_ + kSocketName;
  const std::string notify_path = daemon->directory_ + "/notify";
  auto notify = BindNotifySocket(notify_path);
  if (!notify.ok()) return notify.status();
  daemon->notify_ = std::move(*notify);

  Environment daemon_environment = environment;
  daemon_environment["NOTIFY_SOCKET"] = notify_path;
  if (!options.verbose) daemon_environment.emplace("COLLECTIVED_LOG_LEVEL", "warn");
  SpawnOptions spawn{.argv = {options.binary.empty() ? DefaultBinary() : options.binary, "--socket",
                              daemon->socket_},
                     .environment = ToEnvp(daemon_environment),
                     .output = SpawnOptions::Output::kOnePipe};
  spawn.argv.insert(spawn.argv.end(), options.args.begin(), options.args.end());
  auto process = ChildProcess::Spawn(spawn);
  if (!process.ok()) {
    const bool searched = options.binary.empty() && absl::IsNotFound(process.status());
    return absl::Status(process.status().code(),
                        absl::StrCat(process.status().message(),
                                     searched ? " (not next to collectiverun, not on PATH; "
                                                "--daemon PATH selects one)"
                                              : ""));
  }
  daemon->process_ = std::move(*process);
  daemon->output_.emplace(daemon->process_->TakeStdout(), "[collectived] ", STDERR_FILENO);
  if (absl::Status ready = daemon->AwaitReady(signals); !ready.ok()) return ready;
  // Nothing reads the daemon's later notifications (its job's state): with
  // the socket gone they fail at once instead of filling a queue no one
  // empties.
  daemon->notify_.Reset();
  ::unlink(notify_path.c_str());
  return daemon;
}

absl::Status PrivateDaemon::AwaitReady(const SignalWatcher& signals) {
  const absl::Time deadline = absl::Now() + kStartTimeout;
  bool ready = false;
  bool interrupted = false;
  std::optional<int> exited;
  while (!ready) {
    PollSet set;
    set.Add(notify_.get(), [&] { ready = ReadReady(notify_.get()); });
    set.Add(signals.fd(), [&] { interrupted = true; });
    Watch(set, [&](int status) { exited = status; });
    if (!set.Wait(deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("collectived (pid ", pid(),
                                                      ") did not report ready within ",
                                                      absl::FormatDuration(kStartTimeout)));
    }
    if (exited.has_value()) {
      output_->Drain();
      return absl::UnavailableError(absl::StrCat("collectived ", DescribeExit(*exited),
                                                 " before it was ready (its output, if any, is "
                                                 "above as [collectived] lines)"));
    }
    if (interrupted) return absl::CancelledError("interrupted while collectived started");
  }
  return absl::OkStatus();
}

PrivateDaemon::~PrivateDaemon() { Stop(); }

void PrivateDaemon::Watch(PollSet& set, const std::function<void(int)>& on_exit) {
  if (output_.has_value() && output_->open()) set.Add(output_->fd(), [this] { output_->Pump(); });
  if (process_.has_value() && !process_->reaped()) {
    set.Add(process_->pidfd(), [this, on_exit] {
      if (const std::optional<int> status = process_->TryReap()) on_exit(*status);
    });
  }
}

void PrivateDaemon::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (process_.has_value() && !process_->reaped()) {
    process_->Signal(SIGTERM);
    const absl::Time deadline = absl::Now() + kStopTimeout;
    bool killed = false;
    while (!process_->reaped()) {
      PollSet set;
      Watch(set, [](int) {});
      if (!set.Wait(killed ? std::nullopt : std::optional<absl::Time>(deadline))) {
        Say(absl::StrCat("collectived (pid ", pid(), ") did not stop within ",
                         absl::FormatDuration(kStopTimeout), " of SIGTERM; killing it"));
        process_->Signal(SIGKILL);
        killed = true;
      }
    }
    const int status = *process_->TryReap();
    if (!killed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      Say(absl::StrCat("collectived (pid ", pid(), ") ", DescribeExit(status),
                       " when asked to stop"));
    }
  }
  if (output_.has_value()) output_->Drain();
  const std::optional<int> status = process_.has_value() ? process_->TryReap() : std::nullopt;
  if (status.has_value() && !(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)) {
    RemoveLeftovers();
  }
  if (!directory_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
}

// A daemon that died or was killed could not remove its segments; nobody
// else will use a socket path that goes away with its directory.
void PrivateDaemon::RemoveLeftovers() const {
  const std::string prefix = shm::SegmentNames(::geteuid(), socket_, 0).prefix();
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, prefix)) ::shm_unlink(("/" + name).c_str());
  }
}

absl::Status CheckDaemonListening(const std::string& socket) {
  auto address = UnixAddress(socket);
  if (!address.ok()) return address.status();
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Errno("socket");
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "no collectived answers on ", socket, ": ", std::strerror(errno),
        " (--socket or COLLECTIVE_SOCKET names it; without either, collectiverun starts a "
        "private one)"));
  }
  return absl::OkStatus();
}

}  // namespace collective::launcher
