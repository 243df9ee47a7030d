// Gather: every rank's rows (their number may differ per rank), in rank
// order, concatenated into one result that only the root reads; the other
// ranks' results are empty. The slot is laid out, filled and completed
// across nodes exactly as allgather's (one copy of each rank's input on its
// node, then MPI_Iallgatherv among the nodes: the daemons run no rooted MPI
// operation), so that the root's node holds every row.
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

  void AddTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                    CrossNodeStage& stage) const override {
    AllgatherOp().AddTransfers(tensor, slot, stage);
  }
};

}  // namespace

const CollectiveOp& GatherOp() {
  static const Gather op;
  return op;
}

}  // namespace collective::daemon::exec::ops
