// The one check of a tensor every rank of whose set submitted (or joined),
// before anything runs: the ranks agree (negotiation/mismatch.h), its
// collective can run (the op's own checks; control collectives only while
// no rank has joined), and a CUDA tensor fits the GPU path. On one node the
// job run checks with this node's requests; across nodes node 0 checks with
// every rank's (negotiation/negotiator.h) and every node hears its verdict.
#pragma once

#include "absl/status/status.h"
#include "daemon/negotiation/coordinator.h"

namespace collective::daemon::engine {

enum class CheckScope { kThisNode, kAcrossNodes };

absl::Status CheckReady(const negotiation::ReadyTensor& tensor, CheckScope scope);

}  // namespace collective::daemon::engine
