// Reduce: every rank's input reduced exactly as allreduce reduces it (every
// reduce op but Adasum, prescale and postscale, the same summation order),
// of which only the root reads the result; the other ranks' results are
// empty. On one node, a root whose request names an output in its own
// arena (output_offset) receives the result there in the reducing pass, as
// allreduce's ranks do. Across nodes the nodes combine their partial
// results in allreduce's chunks, with MPI_Ireduce into the root's node,
// where each chunk then goes into the root's output once scaled.
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/phases.h"

namespace collective::daemon::exec::ops {
namespace {

bool IsRoot(const negotiation::ReadyTensor& tensor, size_t index) {
  return tensor.submissions[index].set_rank == tensor.request().root_rank();
}

// The root's output in its own arena (the validator checked the range), when
// it names one and is a rank of this node: on one node the reduction writes
// it, across nodes the final scale on the root's node.
WorkList::Outputs RootOutput(const negotiation::ReadyTensor& tensor) {
  WorkList::Outputs outputs;
  for (size_t i = 0; i < tensor.submissions.size(); ++i) {
    if (IsRoot(tensor, i) && NamesOutput(tensor, i)) {
      outputs.push_back(OutputOf(tensor.submissions[i]));
    }
  }
  return outputs;
}

class Reduce final : public CollectiveOp {
 public:
  absl::Status Check(const negotiation::ReadyTensor& tensor) const override {
    return CheckRoot(tensor);
  }

  uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const override {
    return AllreduceOp().SlotBytes(tensor);
  }

  // The reduction goes into the slot, which only the daemon writes, and
  // each piece to the root's output once reduced: an output that is also
  // the root's input is overwritten only after every read of it.
  void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
               WorkList& work) const override {
    // Across nodes this is the node's partial result, which the root's
    // output must not see.
    AddReduction(tensor, slot, work,
                 WritesArenaOutputs(tensor) ? RootOutput(tensor) : WorkList::Outputs{});
  }

  RankResult ResultOf(const negotiation::ReadyTensor& tensor, size_t index) const override {
    if (!IsRoot(tensor, index)) return {};
    return {.offset = 0,
            .bytes = tensor.request().length(),
            .dim0 = Dim0(tensor.request()),
            .in_output = NamesOutput(tensor, index)};
  }

  absl::string_view phase() const override { return kPhaseReduce; }

  void AddTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                    CrossNodeStage& stage) const override {
    AddReductionTransfers(tensor, slot, stage, RootNode(tensor), RootOutput);
  }

  // Allreduce's plan (chunks of the fused block, each reduced here,
  // combined among the nodes, then scaled), the nodes combining into the
  // root's node only (fusion joins only tensors of one root).
  void PlanAcrossNodes(const FusedBatch& batch, const std::vector<uint64_t>& slots,
                       const PlanContext& context,
                       std::vector<CrossNodeStage>& stages) const override {
    PlanReductionAcrossNodes(batch, slots, context, stages, RootNode(batch.tensors.front()),
                             RootOutput);
  }

 private:
  // The place, in the set's span, of the node that holds the root.
  static int32_t RootNode(const negotiation::ReadyTensor& tensor) {
    return Span(tensor).IndexOf(tensor.request().root_rank());
  }
};

}  // namespace

const CollectiveOp& ReduceOp() {
  static const Reduce op;
  return op;
}

}  // namespace collective::daemon::exec::ops
