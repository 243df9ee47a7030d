#include "client/launcher/host_agent.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/launcher/agent_protocol.h"
#include "client/launcher/child_process.h"
#include "client/launcher/daemon_runner.h"
#include "client/launcher/launcher_output.h"
#include "client/launcher/poll_set.h"
#include "client/launcher/rank_environment.h"
#include "client/launcher/signal_watcher.h"
#include "client/launcher/unique_fd.h"
#include "shm/segment_names.h"

namespace collective::launcher {
namespace {

void Complain(absl::string_view what) {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::cerr << "collectiverun (on " << name << "): " << what << std::endl;
}

std::string ErrnoText(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// The copy of the directory, and the shared memory named for the daemons'
// sockets there (a daemon that died could not remove its own).
void RemoveCopy(const std::string& directory) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory + "/daemons", error)) {
    shm::SegmentNames(::geteuid(), entry.path().string(), 0).RemoveAll();
  }
  std::filesystem::remove_all(directory, error);
}

class HostAgent {
 public:
  explicit HostAgent(std::string directory) : directory_(std::move(directory)) {}

  int Run() {
    // SIGTERM, SIGINT and SIGHUP end it as its session's end does.
    absl::StatusOr<SignalWatcher> signals = SignalWatcher::Start();
    if (!signals.ok()) return Fail(signals.status().message());
    stop_signals_.emplace(std::move(*signals));
    if (!absl::StartsWith(directory_, "/")) return Fail("the directory must be an absolute path");
    if (::mkdir(directory_.c_str(), 0700) != 0) {
      return Fail(ErrnoText(absl::StrCat("cannot make ", directory_)));
    }
    made_ = true;
    if (::mkdir((directory_ + "/daemons").c_str(), 0700) != 0) {
      return Fail(ErrnoText(absl::StrCat("cannot make ", directory_, "/daemons")));
    }
    absl::StatusOr<UniqueFd> notify = BindNotifySocket(directory_ + "/notify");
    if (!notify.ok()) return Fail(notify.status().message());
    notify_ = std::move(*notify);
    known_.insert("notify");
    known_.insert("daemons");
    watch_.Reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!watch_.valid() ||
        ::inotify_add_watch(watch_.get(), directory_.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO) < 0) {
      return Fail(ErrnoText(absl::StrCat("cannot watch ", directory_)));
    }
    if (!Send({.kind = AgentMessage::Kind::kHello, .name = directory_})) return Finish(0);
    while (!done_) {
      PollSet set;
      set.Add(STDIN_FILENO, [this] { OnInput(); });
      set.Add(watch_.get(), [this] { OnDirectoryChanged(); });
      set.Add(notify_.get(), [this] { OnNotify(); });
      set.Add(stop_signals_->fd(), [this] {
        if (stop_signals_->Take().has_value()) done_ = true;
      });
      for (auto& [pid, daemon] : daemons_) {
        const pid_t daemon_pid = pid;
        set.Add(daemon.exit.get(), [this, daemon_pid] { OnDaemonExit(daemon_pid); });
      }
      set.Wait(std::nullopt);
    }
    return Finish(exit_code_);
  }

 private:
  struct Daemon {
    std::string socket;
    UniqueFd exit;  // pidfd
  };

  int Fail(absl::string_view why) {
    Complain(why);
    return Finish(1);
  }

  // Removes what the job left on this machine.
  int Finish(int code) {
    if (made_) RemoveCopy(directory_);
    return code;
  }

  bool Send(const AgentMessage& message) {
    if (WriteAll(STDOUT_FILENO, EncodeAgentMessage(message))) return true;
    done_ = true;  // collectiverun is gone
    return false;
  }

  void OnInput() {
    char buffer[65536];
    const ssize_t got = ::read(STDIN_FILENO, buffer, sizeof(buffer));
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (got <= 0) {
      done_ = true;
      return;
    }
    reader_.Append(absl::string_view(buffer, static_cast<size_t>(got)));
    while (std::optional<absl::StatusOr<AgentMessage>> message = reader_.Next()) {
      if (!message->ok() || (*message)->kind != AgentMessage::Kind::kFile) {
        Complain(message->ok() ? "collectiverun sent a message only an agent sends"
                               : message->status().message());
        exit_code_ = 1;
        done_ = true;
        return;
      }
      WriteFile((*message)->name, (*message)->content);
    }
  }

  // Written beside its place, then renamed: a worker reads the old file or
  // the new one, never half of one.
  void WriteFile(const std::string& name, const std::string& content) {
    known_.insert(name);
    const std::string path = absl::StrCat(directory_, "/", name);
    const std::string staging = absl::StrCat(directory_, "/.", name, ".agent");
    const int fd = ::open(staging.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const bool wrote = fd >= 0 && WriteAll(fd, content);
    if (fd >= 0) ::close(fd);
    if (!wrote || std::rename(staging.c_str(), path.c_str()) != 0) {
      Complain(ErrnoText(absl::StrCat("cannot write ", path)));
    }
  }

  // A worker wrote a marker: every file here that collectiverun did not
  // send, once.
  void OnDirectoryChanged() {
    alignas(inotify_event) char events[4096];
    while (::read(watch_.get(), events, sizeof(events)) > 0) {
    }
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
      const std::string name = entry.path().filename().string();
      if (name.front() == '.' || !entry.is_regular_file(error) || !IsRendezvousName(name) ||
          !known_.insert(name).second) {
        continue;
      }
      if (!Send({.kind = AgentMessage::Kind::kMarker, .name = name})) return;
    }
  }

  void OnNotify() {
    for (ReadyNotice& notice : ReadReadyNotices(notify_.get())) {
      if (notice.socket.empty() || daemons_.count(notice.pid) > 0) continue;
      UniqueFd exit(static_cast<int>(::syscall(SYS_pidfd_open, notice.pid, 0)));
      if (!exit.valid()) {
        Complain(ErrnoText(absl::StrCat("pidfd_open of collectived ", notice.pid)));
        continue;
      }
      if (!Send({.kind = AgentMessage::Kind::kReady, .name = notice.socket, .pid = notice.pid})) {
        return;
      }
      daemons_[notice.pid] = {.socket = notice.socket, .exit = std::move(exit)};
    }
  }

  void OnDaemonExit(pid_t pid) {
    const auto it = daemons_.find(pid);
    if (it == daemons_.end()) return;
    const std::string socket = it->second.socket;
    daemons_.erase(it);
    Send({.kind = AgentMessage::Kind::kExited, .name = socket, .pid = pid});
  }

  std::string directory_;
  bool made_ = false;
  bool done_ = false;
  int exit_code_ = 0;
  std::optional<SignalWatcher> stop_signals_;
  UniqueFd watch_;
  UniqueFd notify_;
  AgentMessageReader reader_;
  std::set<std::string> known_;  // sent by collectiverun, or reported
  std::map<pid_t, Daemon> daemons_;
};

}  // namespace

int RunHostAgent(const std::string& directory) { return HostAgent(directory).Run(); }

int RunHostCleanup(const std::string& directory) {
  // Only what an agent makes: an absolute path named as collectiverun names
  // a machine's copy, a directory (not a link) of this user, 0700.
  const std::string name = std::filesystem::path(directory).filename().string();
  struct stat info {};
  if (!absl::StartsWith(directory, "/") || !absl::StartsWith(name, "collectiverun-elastic-") ||
      !absl::StrContains(name, "-host") || ::lstat(directory.c_str(), &info) != 0 ||
      !S_ISDIR(info.st_mode) || info.st_uid != ::geteuid() || (info.st_mode & 0777) != 0700) {
    Complain(absl::StrCat("not an agent's directory, left alone: ", directory));
    return 1;
  }
  RemoveCopy(directory);
  return 0;
}

int RunRemoteExec(double grace_seconds, const std::vector<std::string>& command) {
  // SIGTERM, SIGINT and SIGHUP are passed on to the command.
  absl::StatusOr<SignalWatcher> signals = SignalWatcher::Start();
  if (!signals.ok()) {
    Complain(signals.status().message());
    return 1;
  }
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Spawn({.argv = command, .environment = ToEnvp(CurrentEnvironment())});
  if (!child.ok()) {
    Complain(child.status().message());
    return absl::IsNotFound(child.status()) ? 127 : 126;
  }
  std::optional<absl::Time> kill_at;
  bool input_open = true;
  while (!child->reaped()) {
    PollSet set;
    set.Add(child->pidfd(), [&] { child->TryReap(); });
    set.Add(signals->fd(), [&] {
      while (const std::optional<int> signal = signals->Take()) child->Signal(*signal);
    });
    if (input_open) {
      set.Add(STDIN_FILENO, [&] {
        char buffer[512];
        const ssize_t got = ::read(STDIN_FILENO, buffer, sizeof(buffer));
        if (got > 0 || (got < 0 && errno == EINTR)) return;
        // The session ended: collectiverun stopped this worker, or is gone.
        input_open = false;
        child->Signal(SIGTERM);
        kill_at = absl::Now() + absl::Seconds(grace_seconds);
      });
    }
    if (!set.Wait(kill_at) && kill_at.has_value()) {
      child->Signal(SIGKILL);
      kill_at.reset();
    }
  }
  return ShellExitCode(*child->status());
}

}  // namespace collective::launcher
