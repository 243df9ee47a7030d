#include "daemon/observe/metrics_http.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>
#include <vector>

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/host_port.h"
#include "common/logging.h"

namespace collective::daemon::observe {
namespace {

constexpr size_t kMaxHeadBytes = 8192;
constexpr int64_t kConnectionMs = 5000;
// After an accept error that repeats at once (out of descriptors), so that
// the thread does not spin on it.
constexpr int kAcceptBackoffMs = 100;
// How long a served client may take to close its end.
constexpr int64_t kLingerMs = 1000;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Response(int code, absl::string_view reason, absl::string_view body,
                     absl::string_view extra_headers = "", bool head_only = false) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\n",
                      code == 200 ? "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                                  : "Content-Type: text/plain; charset=utf-8\r\n",
                      "Content-Length: ", body.size(), "\r\n", extra_headers,
                      "Connection: close\r\n\r\n", head_only ? "" : body);
}

std::string ErrnoText(int error) { return std::strerror(error); }

// "http://HOST:PORT/metrics" for the bound socket.
std::string UrlOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  char host[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
    port = ntohs(v6->sin6_port);
    return absl::StrCat("http://[", host, "]:", port, "/metrics");
  }
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
  ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
  port = ntohs(v4->sin_port);
  return absl::StrCat("http://", host, ":", port, "/metrics");
}

}  // namespace

std::string RespondToHttp(absl::string_view head, const MetricsHttpServer::Fetch& fetch) {
  const absl::string_view request_line = head.substr(0, head.find_first_of("\r\n"));
  const std::vector<absl::string_view> parts = absl::StrSplit(request_line, ' ');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() ||
      !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Response(400, "Bad Request", "collectived serves GET /metrics over HTTP/1.x\n");
  }
  const absl::string_view method = parts[0];
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    return Response(404, "Not Found", "collectived serves only /metrics\n");
  }
  if (method != "GET" && method != "HEAD") {
    return Response(405, "Method Not Allowed", "/metrics takes GET or HEAD\n",
                    "Allow: GET, HEAD\r\n");
  }
  absl::StatusOr<std::string> text = fetch();
  if (!text.ok()) {
    return Response(503, "Service Unavailable", absl::StrCat(text.status().message(), "\n"));
  }
  return Response(200, "OK", *text, "", method == "HEAD");
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Bind(
    absl::string_view address) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  if (!parsed.ok()) return parsed.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(parsed->port);
  if (const int error = ::getaddrinfo(parsed->host.c_str(), port.c_str(), &hints, &found);
      error != 0) {
    return absl::InvalidArgumentError(absl::StrCat("metrics_listen '", address,
                                                   "': cannot resolve '", parsed->host,
                                                   "': ", ::gai_strerror(error)));
  }
  int fd = -1;
  int error = 0;
  for (const addrinfo* candidate = found; candidate != nullptr && fd < 0;
       candidate = candidate->ai_next) {
    fd = ::socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                  candidate->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    // A restarted daemon rebinds at once, despite connections of its
    // predecessor in TIME_WAIT.
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (::bind(fd, candidate->ai_addr, candidate->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      error = errno;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, " (metrics_listen): ", ErrnoText(error)));
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    error = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("eventfd: ", ErrnoText(error)));
  }
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(fd, wake, UrlOf(fd)));
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int wake_fd, std::string url)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), url_(std::move(url)) {}

MetricsHttpServer::~MetricsHttpServer() {
  Stop();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void MetricsHttpServer::Start(Fetch fetch) {
  fetch_ = std::move(fetch);
  // Room for every worker up front: adding one never reallocates, so a
  // started thread always finds its place.
  workers_.reserve(kMaxConnections);
  thread_ = std::thread([this] { Serve(); });
  log::Daemon().info("serving metrics on {}", url_);
}

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  // The eventfd stays readable once written: it wakes the accept thread and
  // every connection's thread, whichever poll they are in.
  const uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof(one)) != sizeof(one)) {
    log::Daemon().error("cannot wake the metrics listener: {}", ErrnoText(errno));
  }
  thread_.join();
  for (Worker& worker : workers_) worker.thread.join();
  workers_.clear();
}

void MetricsHttpServer::Reap() {
  std::erase_if(workers_, [](Worker& worker) {
    if (!worker.done->load(std::memory_order_acquire)) return false;
    worker.thread.join();
    return true;
  });
}

void MetricsHttpServer::Dispatch(int fd) {
  Reap();
  // Best effort, without waiting: the socket is non-blocking and the
  // response small.
  const auto refuse = [fd](absl::string_view why) {
    const std::string busy = Response(503, "Service Unavailable",
                                      absl::StrCat(why, "; try again\n"), "Retry-After: 1\r\n");
    (void)::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
    ::close(fd);
  };
  if (workers_.size() >= kMaxConnections) {
    return refuse(
        absl::StrCat("collectived serves ", kMaxConnections, " metrics connections at once"));
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  try {
    workers_.push_back({std::thread([this, fd, done] {
                          Handle(fd);
                          ::close(fd);
                          done->store(true, std::memory_order_release);
                        }),
                        done});
  } catch (const std::system_error& error) {
    // No thread to be had (a thread limit): this connection goes, the
    // daemon stays.
    log::Daemon().warn("metrics listener: cannot start a thread: {}", error.what());
    refuse("collectived cannot serve this connection now");
  }
}

bool MetricsHttpServer::Await(int fd, short events, int64_t deadline_ms) {
  while (true) {
    const int64_t left = deadline_ms < 0 ? -1 : std::max<int64_t>(deadline_ms - NowMs(), 0);
    pollfd fds[2] = {{fd, events, 0}, {wake_fd_, POLLIN, 0}};
    const int ready = ::poll(fds, 2, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0 || fds[1].revents != 0) return false;
    return true;
  }
}

void MetricsHttpServer::Serve() {
  while (Await(listen_fd_, POLLIN, -1)) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      Dispatch(fd);
      continue;
    }
    if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
    log::Daemon().warn("metrics listener: accept failed: {}", ErrnoText(errno));
    pollfd wake = {wake_fd_, POLLIN, 0};
    if (::poll(&wake, 1, kAcceptBackoffMs) > 0) return;  // Stop
  }
}

void MetricsHttpServer::Handle(int fd) {
  const int64_t deadline = NowMs() + kConnectionMs;
  std::string head;
  char buffer[1024];
  size_t end = std::string::npos;
  while (end == std::string::npos) {
    if (head.size() > kMaxHeadBytes) {
      const std::string refusal =
          absl::StrCat("HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n",
                       "Connection: close\r\n\r\n");
      ::send(fd, refusal.data(), refusal.size(), MSG_NOSIGNAL);
      return;
    }
    if (!Await(fd, POLLIN, deadline)) return;
    const ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (got <= 0) return;  // the client went away before a whole request
    head.append(buffer, static_cast<size_t>(got));
    end = head.find("\r\n\r\n");
  }
  const std::string response = RespondToHttp(absl::string_view(head).substr(0, end), fetch_);
  size_t sent = 0;
  while (sent < response.size()) {
    const ssize_t wrote = ::send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (wrote < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!Await(fd, POLLOUT, deadline)) return;
      continue;
    }
    if (wrote <= 0) return;
    sent += static_cast<size_t>(wrote);
  }
  // Closing with unread input would reset the connection and could lose the
  // response's tail; the client's close (or a short linger) ends it.
  ::shutdown(fd, SHUT_WR);
  const int64_t linger = std::min(deadline, NowMs() + kLingerMs);
  while (Await(fd, POLLIN, linger) && ::recv(fd, buffer, sizeof(buffer), 0) > 0) {
  }
}

}  // namespace collective::daemon::observe
