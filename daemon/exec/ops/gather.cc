// Gather: every rank's rows (their number may differ per rank), in rank
// order, concatenated into one result that only the root reads; the other
// ranks' results are empty. The slot is laid out and filled as allgather's
// (one copy of each rank's input on its node); across nodes MPI_Igatherv
// then brings every other node's block to the root's node only, so each
// block crosses the network once.
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/phases.h"

namespace collective::daemon::exec::ops {
namespace {

class Gather final : public CollectiveOp {
 public:
  absl::Status Check(const negotiation::ReadyTensor& tensor) const override {
    return CheckRoot(tensor);
  }

  uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const override {
    return AllgatherOp().SlotBytes(tensor);
  }

  void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
               WorkList& work) const override {
    AllgatherOp().AddWork(tensor, slot, work);
  }

  RankResult ResultOf(const negotiation::ReadyTensor& tensor, size_t index) const override {
    if (tensor.submissions[index].set_rank != tensor.request().root_rank()) return {};
    return AllgatherOp().ResultOf(tensor, index);
  }

  absl::string_view phase() const override { return kPhaseFusionCopy; }

  // Each node's block goes to the root's node only (MPI_Igatherv).
  void AddTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                    CrossNodeStage& stage) const override {
    const NodeRows blocks = NodeRowsOf(tensor);
    if (blocks.row_bytes == 0 || blocks.total_bytes == 0) return;
    const int32_t root = Span(tensor).IndexOf(tensor.request().root_rank());
    // Only the root's node receives: the others' blocks each cross once.
    const uint64_t mine = blocks.rows[static_cast<size_t>(Span(tensor).index)] * blocks.row_bytes;
    stage.bytes += Span(tensor).index == root ? blocks.total_bytes - mine : mine;
    stage.transfers.push_back([span = tensor.span, slot, blocks, root](NodeTransport& transport) {
      return transport.StartGather(*span, slot, blocks.row_bytes, blocks.rows, blocks.displs, root);
    });
  }
};

}  // namespace

const CollectiveOp& GatherOp() {
  static const Gather op;
  return op;
}

}  // namespace collective::daemon::exec::ops
