// Agreement across ranks: every rank must describe the same collective for a
// tensor name — collective, device (CPU or GPU), dtype, group, and what that
// collective needs to agree on (reductions: op, shape and scale factors;
// allgather and alltoall: every dimension but the first; broadcast: root and
// shape; process-set changes: the set). A disagreement becomes one error that every rank
// receives, naming the tensor, the two values and the two ranks, as Horovod
// does.
#pragma once

#include "absl/status/status.h"
#include "daemon/coordinator.h"

namespace collective::daemon {

// OK, or FAILED_PRECONDITION with e.g. "Mismatched allreduce tensor shapes
// for 'layer1.weight': rank 0 sent [17, 3], rank 2 sent [17, 4]".
absl::Status CheckAgreement(const ReadyTensor& tensor);

}  // namespace collective::daemon
