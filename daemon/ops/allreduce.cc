// Allreduce: every rank's input reduced, in rank order, into one result that
// every rank reads. Ranks that have joined contribute zeros.
#include "common/dtype.h"
#include "daemon/ops/ops.h"
#include "daemon/timeline.h"
#include "shm/segment_layout.h"

namespace collective::daemon::ops {
namespace {

class Allreduce final : public CollectiveOp {
 public:
  absl::Status Check(const ReadyTensor&) const override { return absl::OkStatus(); }

  uint64_t SlotBytes(const ReadyTensor& tensor) const override {
    return shm::RoundUp(tensor.request().length(), shm::kDataAlignment);
  }

  void AddWork(const ReadyTensor& tensor, std::byte* slot, WorkList& work) const override {
    AddReduction(tensor, slot, work);
  }

  RankResult ResultOf(const ReadyTensor& tensor, size_t) const override {
    return {.offset = 0, .bytes = tensor.request().length(), .dim0 = Dim0(tensor.request())};
  }

  absl::string_view phase() const override { return kPhaseReduce; }
};

}  // namespace

exec::ReduceSpec ReductionSpec(const ReadyTensor& tensor) {
  const v1::TensorRequest& request = tensor.request();
  exec::ReduceSpec spec;
  spec.dtype = request.dtype();
  spec.op = request.op();
  if (spec.op == v1::REDUCE_OP_AVERAGE) {
    spec.op = v1::REDUCE_OP_SUM;
    spec.divisor = tensor.set_size;
  }
  spec.prescale = request.has_prescale() ? request.prescale() : 1.0;
  spec.postscale = request.has_postscale() ? request.postscale() : 1.0;
  if (tensor.across_nodes) {
    // A partial result: the final scale follows the nodes' combination.
    spec.postscale = 1.0;
    spec.divisor = 1;
  }
  return spec;
}

exec::ReduceSpec FinalScaleSpec(const ReadyTensor& tensor) {
  const v1::TensorRequest& request = tensor.request();
  return exec::ReduceSpec{
      .dtype = request.dtype(),
      .op = v1::REDUCE_OP_SUM,
      .prescale = 1.0,
      .postscale = request.has_postscale() ? request.postscale() : 1.0,
      .divisor = request.op() == v1::REDUCE_OP_AVERAGE ? int64_t{tensor.set_size} : 1};
}

void AddReduction(const ReadyTensor& tensor, std::byte* out, WorkList& work) {
  WorkList::Inputs inputs;
  size_t next = 0;
  // Across nodes the other nodes' ranks are not zeros: they are combined
  // later. (Joined ranks exist only within one node.)
  const int32_t ranks =
      tensor.across_nodes ? static_cast<int32_t>(tensor.submissions.size()) : tensor.set_size;
  for (int32_t rank = 0; rank < ranks; ++rank) {
    if (tensor.across_nodes) {
      inputs.push_back(InputOf(tensor.submissions[next++]));
      continue;
    }
    if (next < tensor.submissions.size() && tensor.submissions[next].set_rank == rank) {
      inputs.push_back(InputOf(tensor.submissions[next++]));
    } else {
      inputs.push_back(work.zeros());
    }
  }
  const exec::ReduceSpec spec = ReductionSpec(tensor);
  work.AddReduce(spec, inputs, out, tensor.request().length() / ElementSize(spec.dtype));
}

const CollectiveOp& AllreduceOp() {
  static const Allreduce op;
  return op;
}

}  // namespace collective::daemon::ops
