// What collectiverun and its host agents (host_agent.h) say to each other
// over the agent's ssh session: text lines, one message each, and a file's
// bytes after its line.
//
//   collectiverun -> agent   file <name> <length>\n<length bytes>
//                              write <name> into the agent's directory
//   agent -> collectiverun   hello <directory>     the directory is ready
//                            marker <name>         a worker wrote <name>
//                            ready <socket> <pid>  a collectived serves there
//                            exited <socket> <pid> and exited since
//
// A name is a file name of the rendezvous directory (no '/', not "." or
// ".."); a socket path holds no whitespace (collectiverun makes both).
#pragma once

#include <optional>
#include <string>

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace collective::launcher {

struct AgentMessage {
  enum class Kind { kFile, kHello, kMarker, kReady, kExited };
  Kind kind = Kind::kFile;
  // The file's name, the directory, or the daemon's socket.
  std::string name;
  std::string content;  // kFile's bytes
  pid_t pid = 0;        // kReady and kExited: the daemon's, on its host
};

// A plain file name: 1 to 255 bytes, no '/', no whitespace, not "." or "..".
bool IsRendezvousName(absl::string_view name);

// The message as sent (its line, and a file's bytes after it).
std::string EncodeAgentMessage(const AgentMessage& message);

// Cuts messages out of what arrives, however it was split.
class AgentMessageReader {
 public:
  void Append(absl::string_view bytes) { buffer_.append(bytes.data(), bytes.size()); }
  // The next whole message; nullopt until more arrives; INVALID_ARGUMENT
  // for a line that is none (the peer is then not to be trusted further).
  std::optional<absl::StatusOr<AgentMessage>> Next();

 private:
  std::string buffer_;
};

}  // namespace collective::launcher
