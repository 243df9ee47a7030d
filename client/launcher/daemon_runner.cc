#include "client/launcher/daemon_runner.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
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

// Reads every pending notification; for each READY=1, records its sender's
// pid as the daemon of the node whose socket it serves (a single daemon is
// node 0).
void ReadReady(int fd, const std::vector<std::string>& sockets, std::vector<pid_t>& pids) {
  for (const ReadyNotice& notice : ReadReadyNotices(fd)) {
    const size_t node =
        sockets.size() == 1
            ? 0
            : static_cast<size_t>(std::find(sockets.begin(), sockets.end(), notice.socket) -
                                  sockets.begin());
    if (node < sockets.size() && pids[node] == 0) pids[node] = notice.pid;
  }
}

// Next to collectiverun (an install or a build tree keeps them together),
// else whatever PATH finds.
std::string DefaultBinary() {
  const std::string self = CollectiverunBinary();
  if (absl::StartsWith(self, "/")) {
    const std::string sibling =
        (std::filesystem::path(self).parent_path() / "collectived").string();
    if (::access(sibling.c_str(), X_OK) == 0) return sibling;
  }
  return "collectived";
}

// mpirun with one collectived per socket (MPI rank i on sockets[i]), as
// stand-in nodes of one machine: more daemons than cores allowed, none
// bound to a core (the trainers share them), a daemon that dies leaving
// the others running (they report it, and the launcher re-forms the job
// without its host), root allowed when the launcher runs as root (as for
// the daemon it starts on its own), and no grace period of mpirun's own
// (odls_base_sigkill_timeout 0): daemons that left a broken world without
// MPI_Finalize (SIGUSR1, see RequestStop) are not waited for, which cost
// 2 s before the next world could start; the launcher stops its daemons
// itself and removes what a killed one left. Across machines, `options.mpirun`
// instead, and each app context on its host with its exports and its
// NOTIFY_SOCKET there (`notify` for this machine's).
std::vector<std::string> MpirunArgv(const std::string& daemon,
                                    const std::vector<std::string>& sockets,
                                    const PrivateDaemonOptions& options,
                                    const std::string& notify) {
  const bool machines = std::any_of(options.hosts.begin(), options.hosts.end(),
                                    [](const std::string& host) { return !host.empty(); });
  std::vector<std::string> argv =
      machines
          ? options.mpirun
          : std::vector<std::string>{
                COLLECTIVE_MPIEXEC, "--oversubscribe", "--bind-to", "none", "-x", "NOTIFY_SOCKET"};
  argv.insert(argv.end(), {"--enable-recovery", "--mca", "odls_base_sigkill_timeout", "0"});
  if (!machines && ::geteuid() == 0) argv.push_back("--allow-run-as-root");
  for (size_t node = 0; node < sockets.size(); ++node) {
    if (node > 0) argv.push_back(":");
    if (machines) {
      argv.insert(argv.end(), options.exports.begin(), options.exports.end());
      const std::string& there = options.remote_notify[node];
      argv.insert(argv.end(), {"-x", "NOTIFY_SOCKET=" + (there.empty() ? notify : there)});
      if (!options.hosts[node].empty()) argv.insert(argv.end(), {"-H", options.hosts[node]});
    }
    for (const std::string& arg :
         {std::string("-np"), std::string("1"), daemon, std::string("--socket"), sockets[node]}) {
      argv.push_back(arg);
    }
    argv.insert(argv.end(), options.args.begin(), options.args.end());
  }
  return argv;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrivateDaemon>> PrivateDaemon::Start(
    const PrivateDaemonOptions& options, const Environment& environment,
    const SignalWatcher& signals) {
  auto daemon = Launch(options, environment);
  if (!daemon.ok()) return daemon.status();
  if (absl::Status ready = (*daemon)->AwaitReady(signals); !ready.ok()) return ready;
  if (absl::Status serving = (*daemon)->Serve(); !serving.ok()) return serving;
  return daemon;
}

absl::StatusOr<std::unique_ptr<PrivateDaemon>> PrivateDaemon::Launch(
    const PrivateDaemonOptions& options, const Environment& environment) {
  auto daemon = std::unique_ptr<PrivateDaemon>(new PrivateDaemon());
  auto directory = MakeDirectory(environment);
  if (!directory.ok()) return directory.status();
  daemon->directory_ = *directory;
  daemon->sockets_ = options.sockets;
  if (daemon->sockets_.empty() && options.nodes == 1) {
    daemon->sockets_.push_back(daemon->directory_ + kSocketName);
  } else if (daemon->sockets_.empty()) {
    for (int node = 0; node < options.nodes; ++node) {
      daemon->sockets_.push_back(absl::StrCat(daemon->directory_, "/node", node, ".sock"));
    }
  }
  daemon->notify_path_ = daemon->directory_ + "/notify";
  auto notify = BindNotifySocket(daemon->notify_path_);
  if (!notify.ok()) return notify.status();
  daemon->notify_ = std::move(*notify);
  daemon->daemon_pids_.assign(daemon->sockets_.size(), 0);
  daemon->remote_.assign(daemon->sockets_.size(), false);
  for (size_t node = 0; node < options.hosts.size(); ++node) {
    daemon->remote_[node] = !options.hosts[node].empty();
  }

  Environment daemon_environment = environment;
  daemon_environment["NOTIFY_SOCKET"] = daemon->notify_path_;
  if (!options.verbose) daemon_environment.emplace("COLLECTIVED_LOG_LEVEL", "warn");
  const std::string binary = CollectivedBinary(options.binary);
  std::vector<std::string> argv = {binary, "--socket", daemon->socket()};
  argv.insert(argv.end(), options.args.begin(), options.args.end());
  SpawnOptions spawn{.argv = !daemon->under_mpirun() ? std::move(argv)
                                                     : MpirunArgv(binary, daemon->sockets_, options,
                                                                  daemon->notify_path_),
                     .environment = ToEnvp(daemon_environment),
                     .output = SpawnOptions::Output::kOnePipe};
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
  daemon->start_deadline_ = absl::Now() + kStartTimeout;
  return daemon;
}

bool PrivateDaemon::ready() const {
  return std::count(daemon_pids_.begin(), daemon_pids_.end(), 0) == 0;
}

void PrivateDaemon::WatchStart(PollSet& set) {
  if (notify_.valid()) {
    set.Add(notify_.get(), [this] { ReadReady(notify_.get(), sockets_, daemon_pids_); });
  }
}

absl::Status PrivateDaemon::StartFailed(std::optional<int> exit_status) {
  if (exit_status.has_value()) {
    output_->Drain();
    return absl::UnavailableError(absl::StrCat(Describe(), " ", DescribeExit(*exit_status),
                                               " before it was ready (its output, if any, is "
                                               "above as [collectived] lines)"));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      Describe(), " did not report ready within ", absl::FormatDuration(kStartTimeout),
      under_mpirun() ? absl::StrCat(" (",
                                    std::count_if(daemon_pids_.begin(), daemon_pids_.end(),
                                                  [](pid_t pid) { return pid > 0; }),
                                    " did)")
                     : ""));
}

absl::Status PrivateDaemon::Serve() {
  if (under_mpirun()) {
    // Each node's daemon, to tell which one exits (mpirun keeps the others:
    // --enable-recovery).
    // One on another machine: its host agent watches it (RemoteExited).
    for (size_t node = 0; node < daemon_pids_.size(); ++node) {
      const pid_t pid = daemon_pids_[node];
      UniqueFd exit(remote_[node] ? ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
                                  : static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
      if (!exit.valid()) return Errno(absl::StrCat("watching collectived ", pid));
      node_exits_.push_back(std::move(exit));
    }
  }
  // Nothing reads the daemon's later notifications (its job's state): with
  // the socket gone they fail at once instead of filling a queue no one
  // empties.
  notify_.Reset();
  ::unlink(notify_path_.c_str());
  return absl::OkStatus();
}

absl::Status PrivateDaemon::AwaitReady(const SignalWatcher& signals) {
  bool interrupted = false;
  std::optional<int> exited;
  while (!ready()) {
    PollSet set;
    WatchStart(set);
    set.Add(signals.fd(), [&] { interrupted = true; });
    Watch(set, [&](int status) { exited = status; });
    if (!set.Wait(start_deadline_) || exited.has_value()) return StartFailed(exited);
    if (interrupted) return absl::CancelledError("interrupted while collectived started");
  }
  return absl::OkStatus();
}

PrivateDaemon::~PrivateDaemon() { Stop(); }

bool PrivateDaemon::under_mpirun() const {
  return sockets_.size() > 1 || std::find(remote_.begin(), remote_.end(), true) != remote_.end();
}

std::string PrivateDaemon::Describe() const {
  if (!under_mpirun()) return absl::StrCat("collectived (pid ", pid(), ")");
  return absl::StrCat("the ", sockets_.size() == 1 ? "" : absl::StrCat(sockets_.size(), " "),
                      "collectived of mpirun (pid ", pid(), ")");
}

void PrivateDaemon::Watch(PollSet& set, const std::function<void(int)>& on_exit) {
  if (output_.has_value() && output_->open()) set.Add(output_->fd(), [this] { output_->Pump(); });
  if (process_.has_value() && !process_->reaped()) {
    set.Add(process_->pidfd(), [this, on_exit] {
      if (const std::optional<int> status = process_->TryReap()) on_exit(*status);
    });
  }
}

void PrivateDaemon::RemoteReady(const std::string& socket, pid_t pid) {
  for (size_t node = 0; node < sockets_.size(); ++node) {
    if (remote_[node] && sockets_[node] == socket && daemon_pids_[node] == 0) {
      daemon_pids_[node] = pid;
    }
  }
}

void PrivateDaemon::RemoteExited(const std::string& socket, pid_t pid) {
  for (size_t node = 0; node < node_exits_.size(); ++node) {
    if (remote_[node] && sockets_[node] == socket && daemon_pids_[node] == pid &&
        node_exits_[node].valid()) {
      const uint64_t one = 1;
      ssize_t ignored = ::write(node_exits_[node].get(), &one, sizeof(one));
      (void)ignored;
    }
  }
}

void PrivateDaemon::WatchNodes(PollSet& set, const std::function<void(int)>& on_node_exit) {
  for (size_t node = 0; node < node_exits_.size(); ++node) {
    if (!node_exits_[node].valid()) continue;
    set.Add(node_exits_[node].get(), [this, node, on_node_exit] {
      node_exits_[node].Reset();
      node_lost_ = true;
      on_node_exit(static_cast<int>(node));
    });
  }
}

void PrivateDaemon::RequestStop(bool world_lost) {
  if (stop_deadline_.has_value() || !process_.has_value() || process_->reaped()) return;
  node_lost_ = node_lost_ || world_lost;
  // mpirun turns a SIGTERM of its own into killing the daemons; each told
  // to stop as a service manager would, they drain and exit, and so does
  // mpirun. A world that lost a node is told so (SIGUSR1): its daemons
  // leave MPI at once, where they would wait for that node's word.
  bool told = false;
  bool remote_told = false;
  for (size_t node = 0; node < node_exits_.size(); ++node) {
    if (!node_exits_[node].valid()) continue;
    if (!remote_[node]) {
      ::kill(daemon_pids_[node], node_lost_ ? SIGUSR1 : SIGTERM);
    } else if (!remote_told) {
      // mpirun passes SIGUSR1 and SIGUSR2 on to every daemon; SIGUSR2
      // stops them as SIGTERM does (its own SIGTERM would kill them).
      process_->SignalChildOnly(node_lost_ ? SIGUSR1 : SIGUSR2);
      remote_told = true;
    }
    told = true;
  }
  // One daemon, or none left under mpirun (or not yet known): the process
  // itself.
  if (!told) process_->Signal(SIGTERM);
  stop_deadline_ = absl::Now() + kStopTimeout;
}

bool PrivateDaemon::exited() const { return !process_.has_value() || process_->reaped(); }

void PrivateDaemon::KillIfPastStopDeadline(absl::Time now) {
  if (killed_ || !stop_deadline_.has_value() || now < *stop_deadline_ || exited()) return;
  Say(absl::StrCat(Describe(), " did not stop within ", absl::FormatDuration(kStopTimeout),
                   " of SIGTERM; killing it"));
  for (size_t node = 0; node < node_exits_.size(); ++node) {
    if (node_exits_[node].valid() && !remote_[node]) ::kill(daemon_pids_[node], SIGKILL);
  }
  process_->Signal(SIGKILL);
  killed_ = true;
}

void PrivateDaemon::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (!exited()) {
    RequestStop();
    while (!process_->reaped()) {
      PollSet set;
      Watch(set, [](int) {});
      if (!set.Wait(killed_ ? std::nullopt : stop_deadline_)) KillIfPastStopDeadline(absl::Now());
    }
    const int status = *process_->TryReap();
    // After a node's daemon died, mpirun's status reports that one.
    if (!killed_ && !node_lost_ && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      Say(absl::StrCat(Describe(), " ", DescribeExit(status), " when asked to stop"));
    }
  }
  if (output_.has_value()) output_->Drain();
  // A daemon that died or was killed could not remove its segments, and
  // nobody else uses a socket that goes away with its directory. Whatever
  // the exit status says: under mpirun --enable-recovery, a node's daemon
  // can die while mpirun still exits 0.
  if (process_.has_value()) {
    for (const std::string& socket : sockets_)
      shm::SegmentNames(::geteuid(), socket, 0).RemoveAll();
  }
  if (!directory_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
}

absl::StatusOr<UniqueFd> BindNotifySocket(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return Errno("socket");
  auto address = UnixAddress(path);
  if (!address.ok()) return address.status();
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) != 0) {
    return Errno(absl::StrCat("bind ", path));
  }
  const int on = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0) {
    return Errno("setsockopt SO_PASSCRED");
  }
  return fd;
}

std::vector<ReadyNotice> ReadReadyNotices(int fd) {
  std::vector<ReadyNotice> notices;
  char buffer[4096];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  while (true) {
    iovec data{.iov_base = buffer, .iov_len = sizeof(buffer)};
    msghdr message{};
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    const ssize_t got = ::recvmsg(fd, &message, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return notices;
    pid_t sender = 0;
    for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
         header = CMSG_NXTHDR(&message, header)) {
      if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_CREDENTIALS) {
        ucred credentials{};
        std::memcpy(&credentials, CMSG_DATA(header), sizeof(credentials));
        sender = credentials.pid;
      }
    }
    bool ready = false;
    std::string socket;
    for (absl::string_view line :
         absl::StrSplit(absl::string_view(buffer, static_cast<size_t>(got)), '\n')) {
      if (line == "READY=1") ready = true;
      if (absl::ConsumePrefix(&line, "STATUS=idle, serving ")) socket = std::string(line);
    }
    if (ready && sender > 0) notices.push_back({.pid = sender, .socket = std::move(socket)});
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

std::string CollectiverunBinary() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string("collectiverun") : self.string();
}

std::string CollectivedBinary(const std::string& chosen) {
  return chosen.empty() ? DefaultBinary() : chosen;
}

}  // namespace collective::launcher
