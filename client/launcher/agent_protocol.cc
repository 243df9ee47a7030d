#include "client/launcher/agent_protocol.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace collective::launcher {
namespace {

// A file larger than this is no rendezvous file (the world file is a few
// hundred bytes): a length beyond it means the stream is corrupt.
constexpr size_t kMaxFileBytes = 1 << 20;

absl::Status Malformed(absl::string_view line) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed host agent message '", line.substr(0, 200), "'"));
}

}  // namespace

bool IsRendezvousName(absl::string_view name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
         std::none_of(name.begin(), name.end(),
                      [](char c) { return c == '/' || absl::ascii_isspace(c) || c == '\0'; });
}

std::string EncodeAgentMessage(const AgentMessage& message) {
  switch (message.kind) {
    case AgentMessage::Kind::kFile:
      return absl::StrCat("file ", message.name, " ", message.content.size(), "\n",
                          message.content);
    case AgentMessage::Kind::kHello:
      return absl::StrCat("hello ", message.name, "\n");
    case AgentMessage::Kind::kMarker:
      return absl::StrCat("marker ", message.name, "\n");
    case AgentMessage::Kind::kReady:
      return absl::StrCat("ready ", message.name, " ", message.pid, "\n");
    case AgentMessage::Kind::kExited:
      return absl::StrCat("exited ", message.name, " ", message.pid, "\n");
  }
  return "";
}

std::optional<absl::StatusOr<AgentMessage>> AgentMessageReader::Next() {
  const size_t end = buffer_.find('\n');
  if (end == std::string::npos) {
    if (buffer_.size() > 4096) return Malformed(buffer_);
    return std::nullopt;
  }
  const std::string line = buffer_.substr(0, end);
  const std::vector<std::string> words = absl::StrSplit(line, ' ');
  AgentMessage message;
  size_t consumed = end + 1;
  int pid = 0;
  if (words.size() == 3 && words[0] == "file") {
    size_t length = 0;
    if (!IsRendezvousName(words[1]) || !absl::SimpleAtoi(words[2], &length) ||
        length > kMaxFileBytes) {
      return Malformed(line);
    }
    if (buffer_.size() < consumed + length) return std::nullopt;
    message.kind = AgentMessage::Kind::kFile;
    message.content = buffer_.substr(consumed, length);
    consumed += length;
  } else if (words.size() == 2 && words[0] == "hello" && absl::StartsWith(words[1], "/")) {
    message.kind = AgentMessage::Kind::kHello;
  } else if (words.size() == 2 && words[0] == "marker" && IsRendezvousName(words[1])) {
    message.kind = AgentMessage::Kind::kMarker;
  } else if (words.size() == 3 && (words[0] == "ready" || words[0] == "exited") &&
             absl::StartsWith(words[1], "/") && absl::SimpleAtoi(words[2], &pid) && pid > 0) {
    message.kind = words[0] == "ready" ? AgentMessage::Kind::kReady : AgentMessage::Kind::kExited;
    message.pid = pid;
  } else {
    return Malformed(line);
  }
  message.name = words[1];
  buffer_.erase(0, consumed);
  return message;
}

}  // namespace collective::launcher
