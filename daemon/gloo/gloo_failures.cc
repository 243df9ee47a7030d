#include "daemon/gloo/gloo_failures.h"

#include <cstddef>
#include <exception>
#include <memory>
#include <string>

#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace collective::daemon::gloo {
namespace {

// A slot nothing is ever sent on: receiving there only asks a connection
// whether it has failed (a failed one throws its stored error).
constexpr uint8_t kProbeSlotPrefix = 0x4f;

// Gloo's text without the "[file:line] " its error macros put first.
absl::string_view WithoutSource(absl::string_view text) {
  if (!text.empty() && text.front() == '[') {
    if (const size_t end = text.find("] "); end != absl::string_view::npos) {
      return text.substr(end + 2);
    }
  }
  return text;
}

std::string NodeOf(const std::vector<int32_t>& nodes, int rank) {
  return rank >= 0 && static_cast<size_t>(rank) < nodes.size()
             ? absl::StrCat(nodes[static_cast<size_t>(rank)])
             : absl::StrCat("at place ", rank);
}

struct BrokenPair {
  int rank = 0;
  std::string error;
};

// The context's connections that have failed, with the error each stored.
std::vector<BrokenPair> BrokenPairs(::gloo::Context& context) {
  std::vector<BrokenPair> broken;
  std::byte unused{};
  std::unique_ptr<::gloo::transport::UnboundBuffer> probe;
  try {
    probe = context.createUnboundBuffer(&unused, 0);
  } catch (const std::exception&) {
    return broken;
  }
  const uint64_t slot = ::gloo::Slot::build(kProbeSlotPrefix, 0);
  for (int rank = 0; rank < context.size; ++rank) {
    if (rank == context.rank) continue;
    try {
      std::unique_ptr<::gloo::transport::Pair>& pair = context.getPair(rank);
      if (pair) pair->recv(probe.get(), slot, 0, 0);
    } catch (const std::exception& error) {
      broken.push_back({rank, std::string(WithoutSource(error.what()))});
    }
  }
  return broken;
}

bool LostByClose(absl::string_view error) {
  return absl::StrContains(error, "closed by peer") || absl::StrContains(error, "Socket closed");
}

}  // namespace

absl::Status DescribeFailure(::gloo::Context& context, const std::vector<int32_t>& nodes,
                             absl::string_view error, std::chrono::milliseconds timeout) {
  const absl::string_view text = WithoutSource(error);
  if (absl::StrContains(text, "Timed out")) {
    std::vector<std::string> others;
    for (int rank = 0; rank < context.size; ++rank) {
      if (rank != context.rank) others.push_back(NodeOf(nodes, rank));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("no answer within ", timeout.count(), " ms from the daemon",
                     others.size() == 1 ? " of node " : "s of nodes ", absl::StrJoin(others, ", "),
                     " (Gloo: ", text, ")"));
  }
  std::vector<BrokenPair> broken = BrokenPairs(context);
  if (broken.empty()) return absl::InternalError(absl::StrCat("Gloo failed: ", text));
  // A node that failed first closes its connections; the nodes that then
  // broke the context on purpose reset theirs (BreakContext). So a closed
  // connection names the cause better than the one this call happened to
  // wait on.
  const BrokenPair* cause = &broken.front();
  for (const BrokenPair& pair : broken) {
    if (pair.error == text) cause = &pair;
  }
  if (!LostByClose(cause->error)) {
    for (const BrokenPair& pair : broken) {
      if (LostByClose(pair.error)) {
        cause = &pair;
        break;
      }
    }
  }
  // When the failure spread before this node looked, more connections are
  // down: they are named too, the likeliest cause first.
  std::vector<std::string> also;
  for (const BrokenPair& pair : broken) {
    if (&pair != cause) also.push_back(NodeOf(nodes, pair.rank));
  }
  return absl::UnavailableError(absl::StrCat(
      LostByClose(cause->error) ? "the daemon of node " : "the connection to the daemon of node ",
      NodeOf(nodes, cause->rank), LostByClose(cause->error) ? " closed its connection" : " failed",
      " (Gloo: ", cause->error, ")",
      also.empty()
          ? ""
          : absl::StrCat("; the connection", also.size() == 1 ? " to node " : "s to nodes ",
                         absl::StrJoin(also, ", "), also.size() == 1 ? " is" : " are",
                         " down too")));
}

void BreakContext(::gloo::Context& context) {
  try {
    context.closeConnections();
  } catch (const std::exception&) {
    // A context whose transport never formed has nothing to close.
  }
  // Closing does not wake the calls waiting on the context; a receive that
  // times out does: Gloo then fails every pending send and receive of every
  // connection of the context. A zero timeout makes it time out at once.
  try {
    std::byte unused{};
    std::unique_ptr<::gloo::transport::UnboundBuffer> buffer =
        context.createUnboundBuffer(&unused, 1);
    buffer->waitRecv(nullptr, std::chrono::milliseconds(0));
  } catch (const std::exception&) {
    // Expected: the timeout this asked for.
  }
}

}  // namespace collective::daemon::gloo
