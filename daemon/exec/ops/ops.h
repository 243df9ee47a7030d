// The data collectives, one per file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/exec/ops/collective_op.h"

namespace collective::daemon::exec::ops {

const CollectiveOp& AllreduceOp();
const CollectiveOp& ReducescatterOp();
const CollectiveOp& AllgatherOp();
const CollectiveOp& BroadcastOp();
const CollectiveOp& AlltoallOp();
// A matched send and receive (ops/message.cc).
const CollectiveOp& MessageOp();
// Allreduce with op=Adasum (ops/adasum.cc).
const CollectiveOp& AdasumAllreduceOp();
// The rooted collectives.
const CollectiveOp& ReduceOp();
const CollectiveOp& GatherOp();
const CollectiveOp& ScatterOp();

// A reduction's kernel spec: AVERAGE becomes SUM divided by the set's size
// (joined ranks count, as in Horovod).
exec::ReduceSpec ReductionSpec(const negotiation::ReadyTensor& tensor);
// Across nodes: what turns the combined sum (or min, max, product) into the
// result — postscale and the average's division — applied in place.
exec::ReduceSpec FinalScaleSpec(const negotiation::ReadyTensor& tensor);

// Alltoall: the rows each rank of the set sends to each rank
// ([sender][receiver], set ranks), from the splits (or an even split) every
// rank sent; the op's Check has vouched for them.
std::vector<std::vector<int64_t>> AlltoallSplits(const negotiation::ReadyTensor& tensor);

// Adds the reduction of `tensor` (one input per rank of its set, zeros for
// joined ranks, in rank order) into `out`. Across nodes: of this node's
// ranks, the partial result the nodes then combine. `copies` (whole
// tensors, like `out`) receive the result too, block by block; `out` may be
// null when they are all that wants it (WorkList::AddReduce).
void AddReduction(const negotiation::ReadyTensor& tensor, std::byte* out, WorkList& work,
                  const WorkList::Outputs& copies = {});
// The same for `count` elements from element `first`.
void AddReductionRange(const negotiation::ReadyTensor& tensor, std::byte* out, WorkList& work,
                       uint64_t first, uint64_t count, const WorkList::Outputs& copies = {});
// The same, where `out` and `copies` point at element `first` itself rather
// than at the tensor's start (a reducescatter rank's block and its output).
void AddReductionOfRange(const negotiation::ReadyTensor& tensor, std::byte* out, WorkList& work,
                         uint64_t first, uint64_t count, const WorkList::Outputs& copies = {});
// Across nodes, a reduction's transfers (allreduce's and reduce's): the
// nodes combine their partial results (an allreduce with kEveryNode, else a
// reduce into the node at place `root_node` of the span), then the final
// scale. For one tensor, and for a fused batch in chunks, the local
// reduction of one chunk overlapping the combination of the one before.
// `outputs_of` names the outputs (whole tensors) that receive a tensor's
// result on this node once it is scaled.
inline constexpr int32_t kEveryNode = -1;
using ResultOutputs = WorkList::Outputs (*)(const negotiation::ReadyTensor& tensor);
void AddReductionTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                           CrossNodeStage& stage, int32_t root_node, ResultOutputs outputs_of);
void PlanReductionAcrossNodes(const FusedBatch& batch, const std::vector<uint64_t>& slots,
                              const PlanContext& context, std::vector<CrossNodeStage>& stages,
                              int32_t root_node, ResultOutputs outputs_of);
// Across nodes, allgather's and gather's blocks: each node's rows (its ranks
// are consecutive in the set) and where, in rows, its block starts.
struct NodeRows {
  uint64_t row_bytes = 0;
  uint64_t total_bytes = 0;
  std::vector<uint64_t> rows;
  std::vector<uint64_t> displs;
};
NodeRows NodeRowsOf(const negotiation::ReadyTensor& tensor);

// Across nodes, a small allreduce node 0 combines as it decides, so that its
// data needs no transfer after the decision (v1::NodeReduction): whether
// `request` qualifies (host memory, at most `max_bytes`, an op the kernels
// reduce element by element).
bool CombinedByNodeZero(const v1::TensorRequest& request, uint64_t max_bytes);
// This node's part of such a tensor (announced across nodes): its ranks'
// inputs reduced, prescaled, before the final scale.
std::string NodePart(const negotiation::ReadyTensor& tensor, const std::byte* zeros);
// Node 0: the nodes' parts combined in node order, as every node then takes
// it (before the final scale); nullopt when a part is not the tensor's size
// or the tensor does not qualify. A negotiation::GlobalCombine.
std::optional<std::string> CombineNodeParts(const std::vector<v1::RankRequest>& everyone,
                                            const std::vector<const std::string*>& parts);

// Across nodes: FinalScaleSpec applied in place to `count` elements of
// `out` from element `first`, when there is anything to apply; then those
// elements copied into `copies` (whole tensors, like `out`).
void AddFinalScaleRange(const negotiation::ReadyTensor& tensor, std::byte* out, WorkList& work,
                        uint64_t first, uint64_t count, const WorkList::Outputs& copies = {});

}  // namespace collective::daemon::exec::ops
