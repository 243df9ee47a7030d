// The metrics over HTTP, for Prometheus to scrape (metrics_listen): a small
// HTTP/1.1 responder on a thread of its own. It answers GET and HEAD of
// /metrics with the text the engine renders, 404 for any other path, 405 for
// other methods and 400 for what is not an HTTP/1.x request; one connection
// at a time, each bounded in size (8 KiB of request head) and time (5 s), and
// closed after its response. Scrapers come every few seconds at most, so
// serving them one by one costs nothing, and one that dawdles is cut off by
// the deadline.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

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

  void Start(Fetch fetch);
  // Ends the thread, cutting off a connection in progress; idempotent.
  void Stop();

 private:
  MetricsHttpServer(int listen_fd, int wake_fd, std::string url);
  void Serve();
  void Handle(int fd);
  // Waits for `events` on `fd` until the deadline; false on the deadline or
  // on Stop.
  bool Await(int fd, short events, int64_t deadline_ms);

  const int listen_fd_;
  const int wake_fd_;
  const std::string url_;
  Fetch fetch_;
  std::thread thread_;
};

// The whole response (status line, headers, body) to one request head: the
// request line and headers, without the blank line that ends them.
std::string RespondToHttp(absl::string_view head, const MetricsHttpServer::Fetch& fetch);

}  // namespace collective::daemon::observe
