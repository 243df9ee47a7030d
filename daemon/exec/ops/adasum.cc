// Allreduce with op=Adasum (exec/adasum_kernel.h): the ranks' inputs combined
// as a binary tree in set-rank order, neighbours first, which is the result
// of Horovod's exchange among all ranks. Each tensor is one piece of work,
// since its coefficients need its whole dot products.
//
// Across nodes, every node holds the same power-of-two number of consecutive
// set ranks, so the tree's lower levels are each node's own ranks: a node
// combines its ranks into its block of the slot, the nodes allgather their
// blocks, and every node combines the blocks in node order into the result
// at the start of the slot — the same numbers on every node, the same tree
// as Horovod's.
//
// A rank that names an output in its own arena (TensorRequest.output_offset)
// gets the result there too, copied from the slot once the whole tensor is
// combined (on one node by the local work, across nodes after the nodes'
// combination), so an output that is also the rank's input is read first.
//
// ADASUM_SCOPE_NODES is Horovod's NCCL build's GPU Adasum: a node sums its
// ranks (prescaled) into its block instead, the nodes' blocks are combined
// as above, and the result is scaled by postscale / ranks per node (Horovod
// divides the postscale factor by the local size). On one node that is the
// average.
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "daemon/exec/adasum_kernel.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/phases.h"
#include "shm/segment_layout.h"

namespace collective::daemon::exec::ops {
namespace {

uint64_t BlockBytes(const negotiation::ReadyTensor& tensor) {
  return shm::RoundUp(tensor.request().length(), shm::kDataAlignment);
}

uint64_t Count(const negotiation::ReadyTensor& tensor) {
  return tensor.request().length() / ElementSize(tensor.request().dtype());
}

bool IsNodeScope(const negotiation::ReadyTensor& tensor) {
  return tensor.request().adasum_scope() == v1::ADASUM_SCOPE_NODES;
}

// The factor applied to the combined result: postscale, divided by the ranks
// per node for the node scope (in double, as Horovod divides its factor).
double FinalScale(const negotiation::ReadyTensor& tensor) {
  const v1::TensorRequest& request = tensor.request();
  const double postscale = request.has_postscale() ? request.postscale() : 1.0;
  if (!IsNodeScope(tensor)) return postscale;
  const int32_t per_node =
      tensor.span != nullptr ? Span(tensor).count[Span(tensor).index] : tensor.set_size;
  return postscale / per_node;
}

class AdasumAllreduce final : public CollectiveOp {
 public:
  absl::Status Check(const negotiation::ReadyTensor& tensor) const override {
    // Node 0 decides with every rank's request and the set's span; each
    // node runs with its own part and the span.
    if (tensor.span != nullptr) {
      const job::SetSpan& span = Span(tensor);
      for (int32_t count : span.count) {
        if (count != span.count.front()) {
          return absl::UnimplementedError(absl::StrCat(
              "tensor '", tensor.name,
              "': Adasum across nodes needs every node to hold the same number of the set's ranks, "
              "so that Horovod's pairing of rank r with r ^ 1, r ^ 2, ... combines each node's "
              "ranks before it combines nodes; the nodes hold ",
              absl::StrJoin(span.count, ", "), " ranks"));
        }
      }
    }
    if (IsNodeScope(tensor)) {
      const int32_t nodes = tensor.span != nullptr ? Span(tensor).size() : 1;
      if (!IsAdasumSize(nodes)) {
        return absl::UnimplementedError(absl::StrCat(
            "tensor '", tensor.name,
            "': Adasum of GPU tensors combines the nodes' sums pairwise (node n with n ^ 1, "
            "n ^ 2, ... as Horovod's NCCL build does) and needs a power-of-two number of nodes; "
            "the process set spans ",
            nodes));
      }
      return absl::OkStatus();
    }
    if (!IsAdasumSize(tensor.set_size)) {
      return absl::UnimplementedError(absl::StrCat(
          "tensor '", tensor.name,
          "': Adasum needs a power-of-two number of ranks (it pairs rank r with r ^ 1, r ^ 2, "
          "... as Horovod does, and Horovod refuses other sizes too); the process set has ",
          tensor.set_size));
    }
    return absl::OkStatus();
  }

  // Across nodes, every node's partial result follows the result.
  uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const override {
    const uint64_t blocks = tensor.across_nodes ? 1 + Span(tensor).size() : 1;
    return BlockBytes(tensor) * blocks;
  }

  void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
               WorkList& work) const override {
    // This node's ranks in set-rank order, zeros for those that joined.
    int32_t first = 0;
    int32_t count = tensor.set_size;
    std::byte* out = slot;
    // Node 0 decides with every rank's request and the set's span; each
    // node runs with its own part and the span.
    if (tensor.span != nullptr) {
      const job::SetSpan& span = Span(tensor);
      first = span.first[span.index];
      count = span.count[span.index];
      out = slot + BlockBytes(tensor) * (1 + span.index);
    }
    WorkList::Inputs inputs(count, work.zeros());
    for (const negotiation::Submission& submission : tensor.submissions) {
      inputs[submission.set_rank - first] = InputOf(submission);
    }
    if (!IsNodeScope(tensor)) {
      work.AddAdasum(ReductionSpec(tensor), inputs, out, Count(tensor), ArenaOutputsOf(tensor));
      return;
    }
    // The node's sum, prescaled. On one node it is the result; across nodes
    // the scale follows the nodes' combination (ReductionSpec leaves it out).
    exec::ReduceSpec sum = ReductionSpec(tensor);
    sum.op = v1::REDUCE_OP_SUM;
    if (!tensor.across_nodes) sum.postscale = FinalScale(tensor);
    work.AddReduce(sum, inputs, out, Count(tensor), ArenaOutputsOf(tensor));
  }

  RankResult ResultOf(const negotiation::ReadyTensor& tensor, size_t index) const override {
    return {.offset = 0,
            .bytes = tensor.request().length(),
            .dim0 = Dim0(tensor.request()),
            .in_output = NamesOutput(tensor, index)};
  }

  absl::string_view phase() const override { return kPhaseReduce; }

  void AddTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                    CrossNodeStage& stage) const override {
    const uint64_t block = BlockBytes(tensor);
    if (block == 0) return;
    const auto nodes = static_cast<size_t>(Span(tensor).size());
    const std::vector<uint64_t> rows(nodes, 1);
    std::vector<uint64_t> displs(nodes);
    std::iota(displs.begin(), displs.end(), uint64_t{0});
    stage.bytes += block * nodes;
    stage.transfers.push_back(
        [span = tensor.span, blocks = slot + block, block, rows, displs](NodeTransport& transport) {
          return transport.StartAllgather(*span, blocks, block, rows, displs);
        });
    WorkList::Inputs partials;
    for (size_t i = 0; i < nodes; ++i) partials.push_back(slot + block * (1 + i));
    const exec::ReduceSpec spec{.dtype = tensor.request().dtype(),
                                .op = v1::REDUCE_OP_ADASUM,
                                .postscale = FinalScale(tensor)};
    stage.after.AddAdasum(spec, partials, slot, Count(tensor), NamedOutputsOf(tensor));
  }
};

}  // namespace

const CollectiveOp& AdasumAllreduceOp() {
  static const AdasumAllreduce op;
  return op;
}

}  // namespace collective::daemon::exec::ops
