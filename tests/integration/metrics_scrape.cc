#include "tests/integration/metrics_scrape.h"

#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace collective::testing {

absl::StatusOr<std::map<std::string, double>> ParseSamples(absl::string_view text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) {
      if (!absl::StartsWith(line, "# HELP ") && !absl::StartsWith(line, "# TYPE ")) {
        return absl::InvalidArgumentError(absl::StrCat("unexpected comment: ", line));
      }
      continue;
    }
    const size_t space = line.rfind(' ');
    double value = 0;
    const absl::string_view number = space == absl::string_view::npos ? "" : line.substr(space + 1);
    if (number == "+Inf") {
      value = std::numeric_limits<double>::infinity();
    } else if (!absl::SimpleAtod(number, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("not a sample: ", line));
    }
    if (!samples.emplace(std::string(line.substr(0, space)), value).second) {
      return absl::InvalidArgumentError(absl::StrCat("series twice: ", line));
    }
  }
  return samples;
}

absl::StatusOr<HttpReply> HttpExchange(absl::string_view url, absl::string_view request) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat("not an http URL: ", url));
  }
  const absl::string_view authority = rest.substr(0, rest.find('/'));
  const size_t colon = authority.rfind(':');
  std::string host(authority.substr(0, colon));
  if (absl::StartsWith(host, "[")) host = host.substr(1, host.size() - 2);
  const std::string port(authority.substr(colon + 1));

  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", authority));
  }
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool connected = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  ::freeaddrinfo(found);
  if (!connected) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", authority, ": ", why));
  }
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return absl::UnavailableError("cannot send the request");
  }
  std::string reply;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    pollfd readable = {fd, POLLIN, 0};
    const int left = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (left <= 0 || ::poll(&readable, 1, left) <= 0) {
      ::close(fd);
      return absl::DeadlineExceededError(absl::StrCat("no end of reply; got: ", reply));
    }
    char buffer[4096];
    const ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
    if (got <= 0) break;
    reply.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  HttpReply parsed;
  const size_t end = reply.find("\r\n\r\n");
  if (end == std::string::npos || !absl::StartsWith(reply, "HTTP/1.1 ") ||
      !absl::SimpleAtoi(absl::string_view(reply).substr(9, 3), &parsed.code)) {
    return absl::DataLossError(absl::StrCat("not an HTTP reply: ", reply));
  }
  parsed.head = reply.substr(0, end);
  parsed.body = reply.substr(end + 4);
  return parsed;
}

absl::StatusOr<HttpReply> HttpGet(absl::string_view url, absl::string_view path) {
  return HttpExchange(url, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: collectived\r\n\r\n"));
}

}  // namespace collective::testing
