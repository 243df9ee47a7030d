#include "daemon/service/unix_listener.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <grpcpp/server_posix.h>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/logging.h"

namespace collective::daemon::service {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<gid_t> ResolveGroup(const std::string& group) {
  gid_t gid = 0;
  if (absl::SimpleAtoi(group, &gid)) return gid;
  const struct group* entry = ::getgrnam(group.c_str());
  if (entry == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("socket_group '", group, "' does not exist"));
  }
  return entry->gr_gid;
}

absl::Status PrepareDirectory(const std::filesystem::path& directory) {
  std::error_code error;
  if (!std::filesystem::exists(directory, error)) {
    std::filesystem::create_directories(directory, error);
    if (error) {
      return absl::InternalError(absl::StrCat("cannot create socket directory ", directory.string(),
                                              ": ", error.message()));
    }
    ::chmod(directory.c_str(), 0755);
  }
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) {
    return Errno(absl::StrCat("cannot stat socket directory ", directory.string()));
  }
  // Anyone could replace the socket in a world-writable directory, unless
  // the sticky bit (as on /tmp) restricts removal to the owner.
  if ((info.st_mode & S_IWOTH) != 0 && (info.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "socket directory ", directory.string(),
        " is world-writable without the sticky bit; another user could replace the socket"));
  }
  return absl::OkStatus();
}

// Takes the lock file next to the socket; on failure names the holder.
absl::StatusOr<int> TakeLock(const std::string& socket_path) {
  const std::string lock_path = socket_path + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(absl::StrCat("cannot open lock file ", lock_path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buffer[32] = {};
    const ssize_t got = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
    ::close(fd);
    const std::string holder =
        got > 0 ? absl::StrCat(" (pid ", absl::StripAsciiWhitespace(buffer), ")") : "";
    return absl::AlreadyExistsError(absl::StrCat("another collectived", holder,
                                                 " is already serving ", socket_path, " (it holds ",
                                                 lock_path, ")"));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    log::Daemon().warn("cannot write pid into {}: {}", lock_path, std::strerror(errno));
  }
  return fd;
}

}  // namespace

UnixListener::UnixListener(std::string socket_path, gid_t socket_gid, int listen_fd, int lock_fd,
                           int stop_fd, std::chrono::milliseconds silent_timeout)
    : socket_path_(std::move(socket_path)),
      socket_gid_(socket_gid),
      listen_fd_(listen_fd),
      lock_fd_(lock_fd),
      stop_fd_(stop_fd),
      silent_timeout_(silent_timeout),
      silent_(silent_timeout) {}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Bind(const Options& options) {
  const std::string& path = options.socket_path;
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", path, "' must have 1 to ",
                                                   sizeof(address.sun_path) - 1, " bytes"));
  }
  if (absl::Status status = PrepareDirectory(std::filesystem::path(path).parent_path());
      !status.ok()) {
    return status;
  }
  auto lock_fd = TakeLock(path);
  if (!lock_fd.ok()) return lock_fd.status();
  absl::Cleanup release_lock = [&] { ::close(*lock_fd); };

  // We hold the lock, so a socket file left here belongs to a dead daemon.
  ::unlink(path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("cannot create socket");
  absl::Cleanup close_socket = [&] { ::close(fd); };
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return Errno(absl::StrCat("cannot bind ", path));
  }
  if (::chmod(path.c_str(), 0660) != 0) return Errno(absl::StrCat("cannot chmod ", path));
  if (!options.socket_group.empty()) {
    auto gid = ResolveGroup(options.socket_group);
    if (!gid.ok()) return gid.status();
    if (::chown(path.c_str(), static_cast<uid_t>(-1), *gid) != 0) {
      return Errno(absl::StrCat("cannot give ", path, " to group ", options.socket_group));
    }
  }
  struct stat socket_info {};
  if (::stat(path.c_str(), &socket_info) != 0) return Errno(absl::StrCat("cannot stat ", path));
  if (::listen(fd, SOMAXCONN) != 0) return Errno(absl::StrCat("cannot listen on ", path));
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) return Errno("cannot create eventfd");

  std::move(release_lock).Cancel();
  std::move(close_socket).Cancel();
  return std::unique_ptr<UnixListener>(
      new UnixListener(path, socket_info.st_gid, fd, *lock_fd, stop_fd, options.silent_timeout));
}

UnixListener::~UnixListener() {
  Stop();
  ::close(stop_fd_);
  ::unlink((socket_path_ + ".lock").c_str());
  ::close(lock_fd_);
}

void UnixListener::Start(grpc::Server* server, const job::PeerPolicy* policy) {
  thread_ = std::thread([this, server, policy] { AcceptLoop(server, policy); });
}

void UnixListener::Stop() {
  if (stopped_.exchange(true)) return;
  const uint64_t one = 1;
  if (::write(stop_fd_, &one, sizeof(one)) < 0) {
    log::Daemon().error("cannot stop the accept loop: {}", std::strerror(errno));
  }
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::unlink(socket_path_.c_str());
}

bool UnixListener::AwaitStopFor(std::chrono::milliseconds delay) {
  pollfd stop = {stop_fd_, POLLIN, 0};
  return ::poll(&stop, 1, static_cast<int>(delay.count())) > 0;
}

std::string UnixListener::TakeSuppressed(uid_t uid, Closure why) {
  const uint64_t suppressed = std::exchange(refusals_[{uid, why}].suppressed, 0);
  return suppressed == 0 ? ""
                         : absl::StrCat(" (", suppressed, " more refused since the last report)");
}

bool UnixListener::NoteRefusal(uid_t uid, Closure why) {
  const auto now = std::chrono::steady_clock::now();
  auto [it, first] = refusals_.try_emplace({uid, why}, RefusalLog{now, 0});
  if (!first && now - it->second.logged < kRefusalLogInterval) {
    ++it->second.suppressed;
    return false;
  }
  it->second.logged = now;
  return true;
}

void UnixListener::AcceptLoop(grpc::Server* server, const job::PeerPolicy* policy) {
  std::vector<pollfd> fds;
  while (true) {
    fds = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    silent_.AppendPollFds(fds);
    const int timeout = silent_.MillisecondsToNextDeadline(std::chrono::steady_clock::now());
    if (::poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      log::Rpc().error("poll on the listening socket failed: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    for (const int fd : silent_.TakeSpoken(fds.data() + 2, fds.size() - 2)) {
      grpc::AddInsecureChannelFromFd(server, fd);
    }
    CloseSilent();
    if (fds[0].revents != 0 && !AcceptOne(policy)) return;
  }
}

bool UnixListener::AcceptOne(const job::PeerPolicy* policy) {
  // gRPC requires the handed-over socket to be non-blocking.
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    // While descriptors (or kernel memory) run out, accept fails until some
    // connection closes; retrying at once would spin a core and flood the
    // log. Pending connections wait in the listen backlog meanwhile.
    if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
      if (failed_accepts_++ == 0) {
        log::Rpc().error(
            "accept failed: {}; new connections wait until descriptors are free (retrying "
            "every {} ms at most; this is logged once until an accept succeeds)",
            std::strerror(error), kMaxAcceptBackoff.count());
      }
      backoff_ = std::min(kMaxAcceptBackoff, std::max(kMinAcceptBackoff, backoff_ * 2));
      return !AwaitStopFor(backoff_);
    }
    if (error != EINTR && error != EAGAIN && error != ECONNABORTED) {
      log::Rpc().warn("accept failed: {}", std::strerror(error));
    }
    return true;
  }
  if (failed_accepts_ > 0) {
    log::Rpc().warn("accepting connections again after {} failed accepts", failed_accepts_);
    failed_accepts_ = 0;
    backoff_ = std::chrono::milliseconds{0};
  }
  Admit(policy, fd);
  return true;
}

void UnixListener::Admit(const job::PeerPolicy* policy, int fd) {
  auto peer = job::ReadPeerCredentials(fd);
  if (!peer.ok()) {
    log::Rpc().warn("dropping a connection: {}", peer.status().message());
    ::close(fd);
    return;
  }
  // A refused peer is served all the same, so that gRPC answers each of its
  // calls PERMISSION_DENIED with the refusal's text, which tells its user
  // why and how to be admitted (a connection closed here reads "Broken
  // pipe" to the client). It is held to its uid's share of descriptors like
  // anyone's, and gRPC closes it once it has been idle for the silent
  // timeout (GRPC_ARG_MAX_CONNECTION_IDLE_MS).
  if (!policy->Allows(*peer) && NoteRefusal(peer->uid)) {
    log::Rpc().warn("connection from {} refused (its calls are answered PERMISSION_DENIED): {}{}",
                    peer->ToString(), policy->Refusal(*peer).message(), TakeSuppressed(peer->uid));
  }
  // Root and the daemon's uid are trusted as the policy trusts them (they
  // could stop the daemon anyway); any other uid gets a share of the
  // descriptors, so that one user cannot lock the others out.
  if (peer->uid != 0 && peer->uid != ::geteuid()) {
    const size_t limit = ConnectionsPerUidLimit();
    if (connections_.OpenOf(peer->uid) >= limit) {
      if (NoteRefusal(peer->uid, Closure::kTooMany)) {
        log::Rpc().warn(
            "connection from {} closed: uid {} already holds {} connections, the most one user "
            "may hold (a quarter of the daemon's descriptor limit){}",
            peer->ToString(), peer->uid, limit, TakeSuppressed(peer->uid, Closure::kTooMany));
      }
      ::close(fd);
      return;
    }
    connections_.Add(fd, peer->uid);
  }
  log::Rpc().debug("connection from {}", peer->ToString());
  // Until it speaks, gRPC would keep it for ever: held here with a deadline.
  // Silent connections, root's too, get at most a uid's share of the
  // descriptors; past it the oldest goes.
  const std::optional<SilentConnections::Held> evicted = silent_.Hold(
      fd, peer->uid, peer->ToString(), ConnectionsPerUidLimit(), std::chrono::steady_clock::now());
  if (evicted.has_value() && NoteRefusal(evicted->uid, Closure::kSilentTooMany)) {
    log::Rpc().warn(
        "connection from {} closed before its deadline: {} connections had sent nothing, the most "
        "that may wait at once (a quarter of the daemon's descriptor limit){}",
        evicted->peer, silent_.size(), TakeSuppressed(evicted->uid, Closure::kSilentTooMany));
  }
}

void UnixListener::CloseSilent() {
  for (const SilentConnections::Held& held :
       silent_.CloseExpired(std::chrono::steady_clock::now())) {
    if (NoteRefusal(held.uid, Closure::kSilentTooLong)) {
      log::Rpc().warn(
          "connection from {} closed: it sent nothing within {} s of connecting "
          "(silent_connection_timeout_seconds){}",
          held.peer, std::chrono::duration<double>(silent_timeout_).count(),
          TakeSuppressed(held.uid, Closure::kSilentTooLong));
    }
  }
}

}  // namespace collective::daemon::service
