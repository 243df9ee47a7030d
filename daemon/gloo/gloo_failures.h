// What a failed Gloo call means for the job's world, and how a context is
// broken on purpose. Gloo reports a failure as an exception that names a
// peer's address, not its rank; these functions find the node behind it
// and break the rest of the context so that every call blocked on it, here
// and on the other nodes, returns. Called on the transport's worker threads
// (gloo_transport.h), never on the engine thread: they take the pairs'
// locks.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include <gloo/context.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace collective::daemon::gloo {

// Why the Gloo call that threw `error` on `context` failed, as a cause the
// caller puts after "<operation> across nodes failed: ": the node whose
// daemon closed its connection (`nodes` by context rank), the nodes that
// did not answer within `timeout`, or Gloo's own text. Looks at the
// context's connections (which have failed, and how), so call it before
// BreakContext. Unavailable for a lost connection, DeadlineExceeded for a
// timeout, Internal otherwise.
absl::Status DescribeFailure(::gloo::Context& context, const std::vector<int32_t>& nodes,
                             absl::string_view error, std::chrono::milliseconds timeout);

// Closes every connection of `context` (a reset, which the peers see as a
// failure of this node) and fails every send and receive pending on it, so
// that the Gloo calls blocked on it throw at once. The context cannot carry
// anything afterwards. Safe to call more than once, from any thread.
void BreakContext(::gloo::Context& context);

}  // namespace collective::daemon::gloo
