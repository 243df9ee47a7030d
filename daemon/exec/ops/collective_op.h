// One small class per data collective: how much result space a tensor needs,
// the copies and reductions that fill it, and where each rank's result lies.
// The executor fuses tensors of one kind into a block and runs the work of
// all of them on its thread pool; control collectives (barrier, join,
// process-set changes) carry no data and are the engine's.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collective/v1/types.pb.h"
#include "daemon/exec/fusion.h"
#include "daemon/exec/node_transport.h"
#include "daemon/exec/ops/work_list.h"
#include "daemon/negotiation/coordinator.h"

namespace collective::daemon::exec::ops {

// Where one rank's result lies, relative to the start of its tensor's slot.
struct RankResult {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  int64_t dim0 = 0;
  // An int64 array (alltoall: rows received from each rank), when aux_count
  // is not zero.
  uint64_t aux_offset = 0;
  uint32_t aux_count = 0;
  // The result was also written into the output the rank's request named in
  // its own arena (TensorRequest.output_offset): the rank reads nothing from
  // the slot.
  bool in_output = false;
};

// What planning a batch across nodes needs besides the batch.
struct PlanContext {
  std::byte* data = nullptr;         // the result segment's data
  const std::byte* zeros = nullptr;  // kPieceBytes of zeros (joined ranks' inputs)
  uint64_t chunk_bytes = 4 << 20;    // pipelining granularity
};

class CollectiveOp {
 public:
  virtual ~CollectiveOp() = default;

  // What can only be judged with every rank's request and the set's size
  // (splits, the root, joined ranks), before any memory is touched. An error
  // goes to every rank. The default refuses joined ranks: in Horovod only
  // allreduce carries on while ranks have joined.
  virtual absl::Status Check(const negotiation::ReadyTensor& tensor) const;

  // Bytes of the tensor's slot in the fused result block.
  virtual uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const = 0;

  // Adds the work that fills `slot` (the tensor's slot, in the result
  // segment).
  virtual void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
                       WorkList& work) const = 0;

  // Where the result of tensor.submissions[index] lies.
  virtual RankResult ResultOf(const negotiation::ReadyTensor& tensor, size_t index) const = 0;

  // The timeline phase of this op's work.
  virtual absl::string_view phase() const = 0;

  // Across nodes (tensor.across_nodes), where SlotBytes, AddWork and
  // ResultOf mean this node's part: the transfers that complete it with the
  // other nodes' parts, and the work on what arrives.
  virtual void AddTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                            CrossNodeStage& stage) const = 0;

  // The stages of a fused batch across nodes, whose tensors' slots lie at
  // `slots` (offsets into context.data). By default one stage per tensor:
  // AddWork, then AddTransfers.
  virtual void PlanAcrossNodes(const FusedBatch& batch, const std::vector<uint64_t>& slots,
                               const PlanContext& context,
                               std::vector<CrossNodeStage>& stages) const;
};

// The op that runs `request`'s collective: by its collective, and for an
// allreduce by its reduce op too (Adasum has an op of its own; fusion joins
// only tensors of one op); null for control collectives.
const CollectiveOp* OpFor(const v1::TensorRequest& request);

// Helpers shared by the ops.
// Broadcast and the rooted collectives: no rank has joined, and the root is
// a rank of the set. The error names the collective, the tensor and the set.
absl::Status CheckRoot(const negotiation::ReadyTensor& tensor);
const std::byte* InputOf(const negotiation::Submission& submission);
// The output the submission names in its own arena (TensorRequest.output_offset,
// which the validator checked against that arena).
std::byte* OutputOf(const negotiation::Submission& submission);
// Bytes of one row: every dimension but the first (a scalar is one row).
uint64_t RowBytes(const v1::TensorRequest& request);
int64_t Dim0(const v1::TensorRequest& request);
// Across nodes: every submitting rank's request (node 0's decision), and
// how the set lies on the nodes.
const std::vector<v1::RankRequest>& Everyone(const negotiation::ReadyTensor& tensor);
const job::SetSpan& Span(const negotiation::ReadyTensor& tensor);

// The in-arena outputs that requests name (TensorRequest.output_offset), on
// the CPU, each in its own client's arena (the validator checked the range
// against that arena). The ops copy them from the slot, which only the
// daemon writes (scatter on the root's node: from the root's input, the
// bytes the root sends), so a client that scribbles over its own output
// changes no one else's result; on one node as the local work produces each
// block, across nodes once the transfer has brought the result (a node's
// partial reduction never reaches them).
WorkList::Outputs NamedOutputsOf(const negotiation::ReadyTensor& tensor);
// Whether a submission names one of those outputs.
bool NamesOutput(const negotiation::ReadyTensor& tensor, const negotiation::Submission& submission);
bool NamesOutput(const negotiation::ReadyTensor& tensor, size_t index);
// Whether the local work (AddWork) writes those outputs: on one node. Across
// nodes the ops write them after the transfers.
bool WritesArenaOutputs(const negotiation::ReadyTensor& tensor);
// NamedOutputsOf where WritesArenaOutputs, else none.
WorkList::Outputs ArenaOutputsOf(const negotiation::ReadyTensor& tensor);

}  // namespace collective::daemon::exec::ops
