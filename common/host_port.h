// "HOST:PORT" as operators write a listening address: 127.0.0.1:9464,
// [::1]:9464, localhost:9464, 0.0.0.0:9464. Parsed here once for the config
// check and the listener that binds it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace collective {

struct HostPort {
  std::string host;   // without the brackets of an IPv6 literal
  uint16_t port = 0;  // 0: the kernel picks a free one
};

// INVALID_ARGUMENT, saying why, unless `text` is a non-empty host (a name,
// an IPv4 literal, or an IPv6 literal in brackets) and a port 0..65535.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text);

}  // namespace collective
