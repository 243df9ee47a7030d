// What a failed Gloo call means for the job's world, and how a context is
// broken on purpose. Gloo reports a failure as an exception that names a
// peer's address, not its rank; these functions find the node behind it
// and break the rest of the context so that every call blocked on it, here
// and on the other nodes, returns. A node that breaks a context first says
// why to the others (a goodbye), so that all of them name the same cause. Called on the transport's
// worker threads (gloo_transport.h), never on the engine thread: they take the pairs' locks.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gloo/context.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/gloo/gloo_transfers.h"

namespace collective::daemon::gloo {

// What a peer says when it breaks a context on purpose (SayGoodbye): the
// place of the node it lost, or its own place when it leaves. kNoGoodbye
// until one arrives.
constexpr int32_t kNoGoodbye = -1;

// Why a context failed, and the place of the node that caused it (-1 when
// none is known).
struct ContextFailure {
  absl::Status cause;
  int lost = -1;
};

// Why the Gloo call that threw `error` on `context` failed, as a cause the
// caller puts after "<operation> across nodes failed: ": the node a peer's
// goodbye names (`goodbyes`, by context rank, as WatchContext received
// them), else the node whose connection failed (`names` by context rank:
// "1 (host-b)"),
// else the nodes that did not answer within `timeout`, else Gloo's own
// text. Looks at the context's connections, so call it before
// BreakContext. Unavailable for a lost node, DeadlineExceeded for a
// timeout, Internal otherwise.
ContextFailure DescribeFailure(::gloo::Context& context, const std::vector<std::string>& names,
                               absl::string_view error, std::chrono::milliseconds timeout,
                               const std::vector<int32_t>& goodbyes);

// Waits on the calling thread until a connection of `context` fails or a
// peer's goodbye arrives (into `goodbyes`, which must stay put): returns
// Gloo's error, or an empty text for a goodbye; or nothing once `waits`
// ends the wait (AbortAll). Without it, a connection that fails while
// nothing is pending on it, or under a receive being read, would go
// unnoticed until some transfer timed out.
std::optional<std::string> WatchContext(::gloo::Context& context, BufferWaits& waits,
                                        std::vector<int32_t>& goodbyes);

// Tells every peer whose connection still works the place of the node this
// one lost (`lost`; its own place when it leaves), so that they name the
// cause rather than this node. Before BreakContext; never blocks.
void SayGoodbye(::gloo::Context& context, int32_t lost);

// Closes every connection of `context` and fails every send and receive
// pending on it, so that the Gloo calls blocked on it throw at once (the
// others, gloo_transfers.h, end through BufferWaits). The peers see the
// connections close. The context cannot carry anything afterwards. Safe to
// call more than once, from any thread.
void BreakContext(::gloo::Context& context);

}  // namespace collective::daemon::gloo
