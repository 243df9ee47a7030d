// Reading the daemon's metrics as Prometheus would: the text exposition
// format parsed into samples, and a plain HTTP/1.1 GET against the
// metrics_listen endpoint.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace collective::testing {

// Sample lines keyed by the series as printed ("name{label=\"v\",...}"),
// with their values. Comment lines are checked to be HELP or TYPE; anything
// else that is not a sample is an error.
absl::StatusOr<std::map<std::string, double>> ParseSamples(absl::string_view text);

struct HttpReply {
  int code = 0;
  std::string head;  // status line and headers
  std::string body;
};

// Sends `request` (a whole request head, "\r\n\r\n" included) to the
// host:port of `url` ("http://HOST:PORT/..."), and reads the reply to the
// end of the connection (within 10 s).
absl::StatusOr<HttpReply> HttpExchange(absl::string_view url, absl::string_view request);
// GET of `path` at `url`'s host.
absl::StatusOr<HttpReply> HttpGet(absl::string_view url, absl::string_view path);

}  // namespace collective::testing
