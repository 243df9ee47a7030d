// Reducescatter: the inputs are reduced as by allreduce, and rank r reads its
// block of rows. With an uneven first dimension the first (dim0 mod size)
// ranks get one row more, as in Horovod. Across nodes each node reduces its
// own ranks' inputs, MPI_Ireduce_scatter leaves each node the rows of its
// ranks (consecutive in the set) at the start of the slot, and those get
// their final scale.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/phases.h"
#include "shm/segment_layout.h"

namespace collective::daemon::exec::ops {
namespace {

// Rank `rank`'s rows of `rows` among `size` ranks: (first row, count).
std::pair<int64_t, int64_t> RowsOf(int64_t rows, int64_t size, int64_t rank) {
  const int64_t base = rows / size;
  const int64_t extra = rows % size;
  return {rank * base + std::min(rank, extra), base + (rank < extra ? 1 : 0)};
}

class Reducescatter final : public CollectiveOp {
 public:
  uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const override {
    return shm::RoundUp(tensor.request().length(), shm::kDataAlignment);
  }

  void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
               WorkList& work) const override {
    AddReduction(tensor, slot, work);
  }

  RankResult ResultOf(const negotiation::ReadyTensor& tensor, size_t index) const override {
    const int64_t rows = Dim0(tensor.request());
    const auto [first, count] = RowsOf(rows, tensor.set_size, tensor.submissions[index].set_rank);
    // Across nodes this node's rows begin the slot.
    const int64_t origin =
        tensor.across_nodes ? RowsOf(rows, tensor.set_size, NodeFirst(tensor)).first : 0;
    const uint64_t row_bytes = RowBytes(tensor.request());
    return {.offset = static_cast<uint64_t>(first - origin) * row_bytes,
            .bytes = static_cast<uint64_t>(count) * row_bytes,
            .dim0 = count};
  }

  absl::string_view phase() const override { return kPhaseReduce; }

  void AddTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                    CrossNodeStage& stage) const override {
    const v1::TensorRequest& request = tensor.request();
    if (request.length() == 0) return;
    const int64_t rows = Dim0(request);
    const uint64_t row_elements = RowBytes(request) / ElementSize(request.dtype());
    const job::SetSpan& span = Span(tensor);
    std::vector<uint64_t> counts;
    for (int32_t i = 0; i < span.size(); ++i) {
      const int64_t first = RowsOf(rows, tensor.set_size, span.first[i]).first;
      const int64_t end = RowsOf(rows, tensor.set_size, span.first[i] + span.count[i] - 1).first +
                          RowsOf(rows, tensor.set_size, span.first[i] + span.count[i] - 1).second;
      counts.push_back(static_cast<uint64_t>(end - first) * row_elements);
    }
    const v1::DataType dtype = request.dtype();
    const v1::ReduceOp op =
        request.op() == v1::REDUCE_OP_AVERAGE ? v1::REDUCE_OP_SUM : request.op();
    stage.bytes += request.length();
    stage.transfers.push_back(
        [span = tensor.span, slot, counts, dtype, op](NodeTransport& transport) {
          return transport.StartReduceScatter(*span, slot, counts, dtype, op);
        });
    AddFinalScaleRange(tensor, slot, stage.after, 0, counts[span.index]);
  }

 private:
  // This node's first set rank.
  static int32_t NodeFirst(const negotiation::ReadyTensor& tensor) {
    const job::SetSpan& span = Span(tensor);
    return span.first[span.index];
  }
};

}  // namespace

const CollectiveOp& ReducescatterOp() {
  static const Reducescatter op;
  return op;
}

}  // namespace collective::daemon::exec::ops
