// The metrics over HTTP, for Prometheus to scrape (metrics_listen): a small
// HTTP/1.1 responder. It answers GET and HEAD of /metrics with the text the
// engine renders, 404 for any other path, 405 for other methods and 400 for
// what is not an HTTP/1.x request. Each connection is served on a thread of
// its own, bounded in size (8 KiB of request head) and time (5 s) and closed
// after its response, so that a scraper that dawdles (or a port scanner that
// connects and says nothing) delays nobody else; past kMaxConnections at
// once, new ones are answered 503 at once.
//
// Why not prometheus-cpp's Exposer (civetweb): the text is rendered on the
// engine thread, the only one that may read what it counts, and reaches
// other threads as text (the same text `collectivectl metrics` prints); the
// Exposer serves only prometheus::Collectable families, which would mean
// parsing that text back into families for the Exposer to print again. And
// Debian 12's civetweb, which the Exposer serves with, is built without
// IPv6 (metrics_listen [::1]:9464 would stop working), reports a port in use
// as "Failed to setup server ports" without the reason, and takes 2 s to
// stop while a client holds a connection open.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace collective::daemon::observe {

class MetricsHttpServer {
 public:
  // The metrics text (the engine renders it); an error becomes a 503.
  using Fetch = std::function<absl::StatusOr<std::string>()>;

  // Binds and listens on `address` (HOST:PORT); nothing is served before
  // Start.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Bind(absl::string_view address);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // "http://127.0.0.1:9464/metrics", with the port actually bound.
  const std::string& url() const { return url_; }

  // Connections served at once; more are answered 503 and closed.
  static constexpr size_t kMaxConnections = 16;

  // `fetch` is called on the connections' threads, several at once.
  void Start(Fetch fetch);
  // Ends every thread, cutting off the connections in progress; idempotent.
  void Stop();

 private:
  // A connection's thread, and whether it has finished (to be joined).
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  MetricsHttpServer(int listen_fd, int wake_fd, std::string url);
  void Serve();
  // Starts a thread for `fd`, or answers 503 when kMaxConnections are served.
  void Dispatch(int fd);
  // Joins the workers that finished.
  void Reap();
  void Handle(int fd);
  // Waits for `events` on `fd` until the deadline; false on the deadline or
  // on Stop.
  bool Await(int fd, short events, int64_t deadline_ms);

  const int listen_fd_;
  const int wake_fd_;
  const std::string url_;
  Fetch fetch_;
  std::thread thread_;
  std::vector<Worker> workers_;  // the accept thread's
};

// The whole response (status line, headers, body) to one request head: the
// request line and headers, without the blank line that ends them.
std::string RespondToHttp(absl::string_view head, const MetricsHttpServer::Fetch& fetch);

}  // namespace collective::daemon::observe
