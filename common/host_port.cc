#include "common/host_port.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace collective {
namespace {

absl::Status Invalid(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not HOST:PORT (", why,
                   "); e.g. 127.0.0.1:9464, [::1]:9464 or 0.0.0.0:9464"));
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text) {
  HostPort parsed;
  absl::string_view port;
  if (absl::StartsWith(text, "[")) {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) return Invalid(text, "no ']' after the IPv6 address");
    parsed.host = std::string(text.substr(1, close - 1));
    if (text.substr(close + 1, 1) != ":") return Invalid(text, "no ':' after ']'");
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) return Invalid(text, "no port");
    parsed.host = std::string(text.substr(0, colon));
    if (parsed.host.find(':') != std::string::npos) {
      return Invalid(text, "an IPv6 address goes in brackets");
    }
    port = text.substr(colon + 1);
  }
  if (parsed.host.empty()) return Invalid(text, "no host; 0.0.0.0 means every interface");
  const bool printable = std::all_of(parsed.host.begin(), parsed.host.end(), [](char c) {
    return absl::ascii_isgraph(static_cast<unsigned char>(c));
  });
  if (!printable) return Invalid(text, "the host has spaces or control characters");
  uint32_t number = 0;
  if (port.empty() || !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &number) || number > 65535) {
    return Invalid(text, "the port must be a number 0..65535");
  }
  parsed.port = static_cast<uint16_t>(number);
  return parsed;
}

}  // namespace collective
