// daemon/metrics_http and common/host_port: the responses to every kind of
// request, and a real listener on the loopback that serves its clients
// concurrently, stays bounded in size, time and connections, and stops at
// once, whatever its clients do.
#include "daemon/observe/metrics_http.h"

#include <chrono>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/host_port.h"

namespace collective::daemon::observe {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

absl::StatusOr<std::string> Text() { return std::string("m_total 1\n"); }

TEST(RespondToHttpTest, ServesGetAndHeadOfMetrics) {
  const std::string get = observe::RespondToHttp("GET /metrics HTTP/1.1\r\nHost: x", Text);
  EXPECT_THAT(get, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(get, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(get, HasSubstr("Content-Length: 10\r\n"));
  EXPECT_THAT(get, HasSubstr("Connection: close\r\n"));
  EXPECT_THAT(get, EndsWith("\r\n\r\nm_total 1\n"));
  EXPECT_THAT(observe::RespondToHttp("GET /metrics?x=1 HTTP/1.0", Text),
              StartsWith("HTTP/1.1 200 OK"));
  const std::string head = observe::RespondToHttp("HEAD /metrics HTTP/1.1", Text);
  EXPECT_THAT(head, HasSubstr("Content-Length: 10\r\n"));
  EXPECT_THAT(head, EndsWith("\r\n\r\n"));
}

TEST(RespondToHttpTest, RefusesOtherPathsMethodsAndNonHttp) {
  EXPECT_THAT(observe::RespondToHttp("GET / HTTP/1.1", Text), StartsWith("HTTP/1.1 404 Not Found"));
  EXPECT_THAT(observe::RespondToHttp("GET /metricsx HTTP/1.1", Text), StartsWith("HTTP/1.1 404"));
  const std::string post = observe::RespondToHttp("POST /metrics HTTP/1.1", Text);
  EXPECT_THAT(post, StartsWith("HTTP/1.1 405 Method Not Allowed"));
  EXPECT_THAT(post, HasSubstr("Allow: GET, HEAD\r\n"));
  for (const char* bad : {"", "GET", "GET /metrics", "GET /metrics SPDY/3",
                          "GET  /metrics HTTP/1.1", "\x16\x03\x01 TLS hello"}) {
    EXPECT_THAT(observe::RespondToHttp(bad, Text), StartsWith("HTTP/1.1 400 Bad Request")) << bad;
  }
}

TEST(RespondToHttpTest, AnEngineThatCannotAnswerIsA503) {
  const std::string reply = observe::RespondToHttp("GET /metrics HTTP/1.1", [] {
    return absl::StatusOr<std::string>(absl::UnavailableError("collectived is shutting down"));
  });
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 503 Service Unavailable"));
  EXPECT_THAT(reply, EndsWith("collectived is shutting down\n"));
}

TEST(HostPortTest, ParsesHostsAndPorts) {
  auto v4 = ParseHostPort("127.0.0.1:9464");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 9464);
  auto v6 = ParseHostPort("[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  EXPECT_TRUE(ParseHostPort("localhost:80").ok());
  for (const char* bad : {"", "9464", ":9464", "host:", "host:65536", "host:-1", "host:9x",
                          "::1:9464", "[::1]9464", "[::1", "a b:1"}) {
    EXPECT_FALSE(ParseHostPort(bad).ok()) << bad;
  }
  EXPECT_THAT(ParseHostPort("9464").status().message(),
              HasSubstr("'9464' is not HOST:PORT (no port)"));
}

// A real listener on a free loopback port.
class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = observe::MetricsHttpServer::Bind("127.0.0.1:0");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    const std::string& url = server_->url();
    ASSERT_THAT(url, StartsWith("http://127.0.0.1:"));
    ASSERT_THAT(url, EndsWith("/metrics"));
    const std::string port = url.substr(17, url.size() - 17 - 8);
    ASSERT_TRUE(absl::SimpleAtoi(port, &port_)) << url;
    server_->Start(Text);
  }

  int Connect() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port_));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    return fd;
  }

  // Everything the server sends until it closes (or 10 s pass).
  static std::string ReadAll(int fd) {
    std::string reply;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd readable = {fd, POLLIN, 0};
      if (::poll(&readable, 1, 100) <= 0) continue;
      char buffer[4096];
      const ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
      if (got <= 0) break;
      reply.append(buffer, static_cast<size_t>(got));
    }
    return reply;
  }

  std::string Exchange(const std::string& request) const {
    const int fd = Connect();
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string reply = ReadAll(fd);
    ::close(fd);
    return reply;
  }

  std::unique_ptr<observe::MetricsHttpServer> server_;
  int port_ = 0;
};

TEST_F(MetricsHttpServerTest, AnswersARequestSentInPieces) {
  const int fd = Connect();
  for (const char* piece : {"GET /met", "rics HTTP/1.1\r\nHo", "st: x\r\n", "\r\n"}) {
    ASSERT_GT(::send(fd, piece, std::strlen(piece), MSG_NOSIGNAL), 0);
  }
  EXPECT_THAT(ReadAll(fd), EndsWith("\r\n\r\nm_total 1\n"));
  ::close(fd);
}

TEST_F(MetricsHttpServerTest, RefusesAnOversizedHeadAndServesTheNextClient) {
  const std::string huge =
      absl::StrCat("GET /metrics HTTP/1.1\r\nX-Padding: ", std::string(20000, 'a'), "\r\n\r\n");
  EXPECT_THAT(Exchange(huge), StartsWith("HTTP/1.1 431 "));
  EXPECT_THAT(Exchange("GET /metrics HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 200 OK"));
}

// A client that connects and says nothing (a port scanner, a stuck
// scraper) holds its own connection's thread until its 5 s deadline, and
// nobody else's.
TEST_F(MetricsHttpServerTest, ServesOthersWhileAClientSaysNothing) {
  const int silent = Connect();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(Exchange("GET /metrics HTTP/1.1\r\n\r\n"), EndsWith("\r\n\r\nm_total 1\n"));
  EXPECT_THAT(Exchange("GET /metrics HTTP/1.1\r\n\r\n"), EndsWith("\r\n\r\nm_total 1\n"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  ::close(silent);
}

TEST_F(MetricsHttpServerTest, AnswersBeyondItsConnectionsWith503) {
  std::vector<int> silent;
  for (size_t i = 0; i < MetricsHttpServer::kMaxConnections; ++i) silent.push_back(Connect());
  const std::string reply = Exchange("GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 503 Service Unavailable"));
  EXPECT_THAT(reply, HasSubstr("Retry-After: 1\r\n"));
  for (const int fd : silent) ::close(fd);
}

TEST_F(MetricsHttpServerTest, StopsAtOnceWhileClientsSayNothing) {
  const int silent = Connect();
  const int other = Connect();
  // The silent clients hold their threads; Stop must not wait for their 5 s
  // deadline.
  const auto start = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  ::close(silent);
  ::close(other);
}

TEST(MetricsHttpServerBindTest, ReportsAnAddressInUse) {
  auto first = observe::MetricsHttpServer::Bind("127.0.0.1:0");
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = (*first)->url().substr(7, (*first)->url().size() - 7 - 8);
  auto second = observe::MetricsHttpServer::Bind(address);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("cannot serve metrics on ", address,
                                     " (metrics_listen): Address already in use")));
}

}  // namespace
}  // namespace collective::daemon::observe
