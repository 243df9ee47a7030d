// Reducescatter: the inputs are reduced as by allreduce, and rank r reads its
// block of rows. With an uneven first dimension the first (dim0 mod size)
// ranks get one row more, as in Horovod. On one node, a rank that names an
// output in its own arena (TensorRequest.output_offset) gets its block
// there, each block copied from the slot as soon as it is reduced. Across
// nodes each node reduces its own ranks' inputs, MPI_Ireduce_scatter leaves
// each node the rows of its ranks (consecutive in the set) at the start of
// the slot, and those get their final scale, each rank's block then copied
// into the output it names.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"
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
  // A block written into its rank's arena lands away from the rows it is
  // reduced from: over that rank's input it would overwrite rows that other
  // blocks still read, whatever order the pieces run in.
  absl::Status Check(const negotiation::ReadyTensor& tensor) const override {
    RETURN_IF_ERROR(CollectiveOp::Check(tensor));
    if (!WritesArenaOutputs(tensor)) return absl::OkStatus();
    for (size_t i = 0; i < tensor.submissions.size(); ++i) {
      const v1::TensorRequest& request = tensor.submissions[i].request;
      if (!request.has_output_offset()) continue;
      const uint64_t out = request.output_offset();
      const uint64_t block = ResultOf(tensor, i).bytes;
      if (out < request.offset() + request.length() && request.offset() < out + block) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reducescatter of '", tensor.name, "': rank ", tensor.submissions[i].rank,
            "'s output (arena offset ", out, ", ", block, " bytes) overlaps its input (offset ",
            request.offset(), ", ", request.length(),
            " bytes): its rows would overwrite rows the other ranks' blocks are reduced from"));
      }
    }
    return absl::OkStatus();
  }

  uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const override {
    return shm::RoundUp(tensor.request().length(), shm::kDataAlignment);
  }

  void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
               WorkList& work) const override {
    if (ArenaOutputsOf(tensor).empty()) return AddReduction(tensor, slot, work);
    // Block by block, each with its rank's output (every rank of the set
    // submitted: none may have joined).
    const v1::TensorRequest& request = tensor.request();
    const int64_t rows = Dim0(request);
    const uint64_t row_bytes = RowBytes(request);
    const uint64_t row_elements = row_bytes / ElementSize(request.dtype());
    for (const negotiation::Submission& submission : tensor.submissions) {
      const auto [first, count] = RowsOf(rows, tensor.set_size, submission.set_rank);
      // Its rank's output, if it named one in its arena.
      const WorkList::Outputs output = submission.request.has_output_offset()
                                           ? WorkList::Outputs{OutputOf(submission)}
                                           : WorkList::Outputs{};
      AddReductionOfRange(tensor, slot + static_cast<uint64_t>(first) * row_bytes, work,
                          static_cast<uint64_t>(first) * row_elements,
                          static_cast<uint64_t>(count) * row_elements, output);
    }
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
            .dim0 = count,
            .in_output = NamesOutput(tensor, index)};
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
    const uint64_t element = ElementSize(dtype);
    const v1::ReduceOp op =
        request.op() == v1::REDUCE_OP_AVERAGE ? v1::REDUCE_OP_SUM : request.op();
    stage.bytes += request.length();
    stage.transfers.push_back(
        [span = tensor.span, slot, counts, dtype, op](NodeTransport& transport) {
          return transport.StartReduceScatter(*span, slot, counts, dtype, op);
        });
    // The final scale block by block (the node's ranks' blocks, which make
    // up its rows: no rank may have joined), each then copied into its
    // rank's output if it names one.
    for (size_t i = 0; i < tensor.submissions.size(); ++i) {
      const RankResult block = ResultOf(tensor, i);
      const WorkList::Outputs output = NamesOutput(tensor, i)
                                           ? WorkList::Outputs{OutputOf(tensor.submissions[i])}
                                           : WorkList::Outputs{};
      AddFinalScaleRange(tensor, slot + block.offset, stage.after, 0, block.bytes / element,
                         output);
    }
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
