#include "daemon/gloo/gloo_failures.h"

#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>

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
// The slot of goodbyes (clear of gloo_transfers.cc's).
constexpr uint8_t kGoodbyeSlotPrefix = 0x4e;
// Longer than any daemon lives, short enough for the clock's arithmetic: a
// wait that timed out would fail the context.
constexpr auto kForever = std::chrono::hours(24 * 365 * 10);
// How long a lost connection waits for the others to show what they saw.
constexpr auto kSettleTick = std::chrono::milliseconds(5);
constexpr int kSettleTicks = 20;

// Gloo's text without the "[file:line] " its error macros put first.
absl::string_view WithoutSource(absl::string_view text) {
  if (!text.empty() && text.front() == '[') {
    if (const size_t end = text.find("] "); end != absl::string_view::npos) {
      return text.substr(end + 2);
    }
  }
  return text;
}

std::string NodeOf(const std::vector<std::string>& names, int rank) {
  return rank >= 0 && static_cast<size_t>(rank) < names.size() ? names[static_cast<size_t>(rank)]
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

ContextFailure DescribeFailure(::gloo::Context& context, const std::vector<std::string>& nodes,
                               absl::string_view error, std::chrono::milliseconds timeout,
                               const std::vector<int32_t>& goodbyes) {
  const absl::string_view text = WithoutSource(error);
  // Written by Gloo's event loop (a receive into `goodbyes`), read here
  // without its lock: atomically, element by element.
  auto said = [&](int rank) {
    if (rank == context.rank || rank >= static_cast<int>(goodbyes.size())) return kNoGoodbye;
    const int32_t lost =
        std::atomic_ref<int32_t>(const_cast<int32_t&>(goodbyes[static_cast<size_t>(rank)]))
            .load(std::memory_order_acquire);
    return lost >= 0 && lost < context.size ? lost : kNoGoodbye;
  };
  const bool timed_out =
      absl::StrContains(text, "Timed out") || absl::StrContains(text, "Application timeout");
  // A peer that breaks the context says why just before its connections
  // close, and the loop may still be reading it; and when a node dies, its
  // connections close one after the other. So a lost connection waits a
  // moment for a goodbye, and for the other connections to show what they
  // saw, before it names anyone. Only on the way to failing the context.
  for (int tick = 0; !timed_out && tick < kSettleTicks; ++tick) {
    bool heard = false;
    for (int rank = 0; rank < context.size; ++rank) heard = heard || said(rank) != kNoGoodbye;
    if (heard) break;
    std::this_thread::sleep_for(kSettleTick);
  }
  for (int rank = 0; rank < context.size; ++rank) {
    const int32_t lost = said(rank);
    if (lost == kNoGoodbye) continue;
    if (lost == rank) {
      return {absl::UnavailableError(absl::StrCat("the daemon of node ", NodeOf(nodes, rank),
                                                  " left the job's world")),
              rank};
    }
    return {absl::UnavailableError(absl::StrCat("the daemon of node ", NodeOf(nodes, lost),
                                                " was lost (node ", NodeOf(nodes, rank),
                                                " lost its connection to it)")),
            lost};
  }
  // The wait that timed out throws "Timed out ..."; it fails the context's
  // other operations (and the watcher's) with "Application timeout ...".
  if (timed_out) {
    std::vector<std::string> others;
    for (int rank = 0; rank < context.size; ++rank) {
      if (rank != context.rank) others.push_back(NodeOf(nodes, rank));
    }
    return {absl::DeadlineExceededError(
                absl::StrCat("no answer within ", timeout.count(), " ms from the daemon",
                             others.size() == 1 ? " of node " : "s of nodes ",
                             absl::StrJoin(others, ", "), " (Gloo: ", text, ")")),
            -1};
  }
  std::vector<BrokenPair> broken = BrokenPairs(context);
  if (broken.empty()) return {absl::InternalError(absl::StrCat("Gloo failed: ", text)), -1};
  // Without a goodbye: the connection whose failure this call saw, else
  // one whose peer closed it, else the first that failed.
  const BrokenPair* cause = nullptr;
  for (const BrokenPair& pair : broken) {
    if (pair.error == text) cause = &pair;
  }
  for (const BrokenPair& pair : broken) {
    if (cause == nullptr && LostByClose(pair.error)) cause = &pair;
  }
  if (cause == nullptr) cause = &broken.front();
  // When the failure spread before this node looked, more connections are
  // down: they are named too, the likeliest cause first.
  std::vector<std::string> also;
  for (const BrokenPair& pair : broken) {
    if (&pair != cause) also.push_back(NodeOf(nodes, pair.rank));
  }
  return {absl::UnavailableError(absl::StrCat(
              LostByClose(cause->error) ? "the daemon of node "
                                        : "the connection to the daemon of node ",
              NodeOf(nodes, cause->rank),
              LostByClose(cause->error) ? " closed its connection" : " failed",
              " (Gloo: ", cause->error, ")",
              also.empty()
                  ? ""
                  : absl::StrCat("; the connection", also.size() == 1 ? " to node " : "s to nodes ",
                                 absl::StrJoin(also, ", "), also.size() == 1 ? " is" : " are",
                                 " down too"))),
          cause->rank};
}

std::optional<std::string> WatchContext(::gloo::Context& context, BufferWaits& waits,
                                        std::vector<int32_t>& goodbyes) {
  std::unique_ptr<::gloo::transport::UnboundBuffer> inbox;
  try {
    inbox = context.createUnboundBuffer(goodbyes.data(), goodbyes.size() * sizeof(int32_t));
  } catch (const std::exception& error) {
    return std::string(error.what());
  }
  waits.Add(inbox.get());
  std::optional<std::string> seen;
  try {
    const uint64_t slot = ::gloo::Slot::build(kGoodbyeSlotPrefix, 0);
    for (int rank = 0; rank < context.size; ++rank) {
      if (rank != context.rank) {
        inbox->recv(rank, slot, static_cast<size_t>(rank) * sizeof(int32_t), sizeof(int32_t));
      }
    }
    // A failed connection fails this pending receive too.
    if (inbox->waitRecv(nullptr, kForever)) seen = std::string();
  } catch (const std::exception& error) {
    seen = std::string(error.what());
  }
  waits.Remove(inbox.get());
  return seen;
}

void SayGoodbye(::gloo::Context& context, int32_t lost) {
  const uint64_t slot = ::gloo::Slot::build(kGoodbyeSlotPrefix, 0);
  try {
    // The peers' inboxes wait already: Gloo writes these at once (one that
    // it cannot write goes with the connection).
    int32_t said = lost;
    std::unique_ptr<::gloo::transport::UnboundBuffer> outbox =
        context.createUnboundBuffer(&said, sizeof(said));
    for (int rank = 0; rank < context.size; ++rank) {
      if (rank == context.rank) continue;
      try {
        outbox->send(rank, slot);
      } catch (const std::exception&) {
        // That connection failed already.
      }
    }
  } catch (const std::exception&) {
    // No transport: nobody to tell.
  }
}

void BreakContext(::gloo::Context& context) {
  // A receive that times out fails every pending send and receive of every
  // connection of the context and closes them (gently: a goodbye written
  // before still arrives, which a reset, closeConnections, would not
  // ensure). A zero timeout makes it time out at once.
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
