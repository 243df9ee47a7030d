// Gloo contexts among N "nodes" of one test process: each rank connects a
// full mesh over loopback TCP through an in-memory rendezvous store, on a
// thread of its own (a rank's connect blocks until every rank is there),
// as Gloo's own tests do. Each rank has its own device (its own event loop
// thread), as each daemon would.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include <gloo/context.h>

#include "daemon/job/set_span.h"

namespace collective::daemon::gloo::testing {

// `size` connected contexts, by rank; `timeout` is each context's default
// operation timeout (Gloo's connect waits a multiple of it). Ignores
// SIGPIPE in the process, as the daemon does.
std::vector<std::shared_ptr<::gloo::Context>> ConnectLocalContexts(
    int size, std::chrono::milliseconds timeout);

// The span of `context`'s rank in a set whose nodes (by place) are
// `nodes`, one set rank per node, its group the context.
job::SetSpan SpanOf(std::shared_ptr<::gloo::Context> context, std::vector<int32_t> nodes);

}  // namespace collective::daemon::gloo::testing
