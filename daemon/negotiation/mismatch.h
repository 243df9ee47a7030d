// Agreement across ranks: every rank must describe the same collective for a
// tensor name — collective, device (CPU or GPU), dtype, group, and what that
// collective needs to agree on (reductions: op, shape and scale factors;
// allgather and alltoall: every dimension but the first; broadcast: root and
// shape; reduce: root and what reductions agree on; gather and scatter: root
// and every dimension but the first, and a scatter's rows add up to the
// root's; process-set changes: the set). A disagreement becomes one error that every rank
// receives, naming the tensor, the two values and the two ranks, as Horovod
// does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/negotiation/coordinator.h"

namespace collective::daemon::negotiation {

// OK, or FAILED_PRECONDITION with e.g. "Mismatched allreduce tensor shapes
// for 'layer1.weight': rank 0 sent [17, 3], rank 2 sent [17, 4]".
absl::Status CheckAgreement(const ReadyTensor& tensor);

// FAILED_PRECONDITION for a collective that cannot run because ranks of its
// set joined (in Horovod only allreduce carries on after a join), naming
// `joined` (set ranks), e.g. "broadcast of 'w' cannot run while rank 1 of
// process set 0 has joined: after a join only allreduce carries on".
absl::Status RefusedAfterJoin(v1::Collective collective, const std::string& name,
                              int32_t process_set_id, const std::vector<int32_t>& joined);
// The same for a ready tensor, naming the ranks that did not submit it.
absl::Status RefusedAfterJoin(const ReadyTensor& tensor);

}  // namespace collective::daemon::negotiation
