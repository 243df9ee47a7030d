// Which CUDA collectives read memory they also write, beyond what the GPU
// path handles: a scatter's root whose output overlaps its input (its own
// rows would overwrite rows the others still receive), a gather's root
// whose input overlaps its output anywhere but at its own rows' place, and
// a message a rank sends to itself into a range that partly overlaps what
// it sends. Each piece of device work runs as several concurrent copies, so
// such ranges would be read and written in no fixed order. Stateless; the
// engine thread calls it before a tensor's batch is planned.
#pragma once

#include "absl/status/status.h"
#include "daemon/negotiation/coordinator.h"

namespace collective::daemon::gpu {

// OK, or why the tensor's ranges of one client overlap where they must not.
absl::Status CheckAliasing(const negotiation::ReadyTensor& tensor);

}  // namespace collective::daemon::gpu
