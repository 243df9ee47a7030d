// Fusion: ready tensors that can share one result buffer and one reduction
// pass are batched together, so that many small gradients cost one
// completion sweep rather than one each. Fusion adds no copies: the local
// reduction writes each tensor straight into its slot of the fused buffer.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/negotiation/coordinator.h"

namespace collective::daemon::exec {

struct FusedBatch {
  std::vector<negotiation::ReadyTensor> tensors;
  // Bytes of the fused buffer: every tensor's slot rounded up to a cache line.
  uint64_t bytes = 0;
  // Across nodes: the chunk size of its transfers, fixed when node 0's
  // decisions planned it, so that every node chunks it alike whatever
  // autotuning decided since.
  uint64_t chunk_bytes = 0;
};

// Bytes a tensor's result takes in a fused buffer.
uint64_t SlotBytes(const negotiation::ReadyTensor& tensor);

// Batches data collectives of the same kind (collective, memory, dtype,
// reduce op, scale factors, process set, root), up to `threshold` bytes per
// batch (0: no fusion). Like Horovod, a
// batch looks ahead past tensors that do not fit or do not match, so the
// order is: batches in order of their first tensor, tensors in input order
// within a batch. A tensor larger than the threshold runs alone.
std::vector<FusedBatch> PlanFusion(std::vector<negotiation::ReadyTensor> tensors,
                                   uint64_t threshold);

}  // namespace collective::daemon::exec
