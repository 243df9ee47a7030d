// Allgather: every rank's input, in rank order, concatenated along the first
// dimension (which may differ per rank) into one result that every rank
// reads. Across nodes each node copies its own ranks' inputs to their place
// in the result, and MPI_Iallgatherv fills in the other nodes' blocks (a
// node's ranks are consecutive in the set, so its block is contiguous).
#include <numeric>

#include "daemon/exec/ops/ops.h"
#include "daemon/exec/phases.h"
#include "shm/segment_layout.h"

namespace collective::daemon::exec::ops {
namespace {

// The input bytes of every submitting rank, by set rank order.
std::vector<uint64_t> Lengths(const negotiation::ReadyTensor& tensor) {
  std::vector<uint64_t> lengths;
  if (tensor.across_nodes) {
    for (const v1::RankRequest& rank : Everyone(tensor)) lengths.push_back(rank.request().length());
  } else {
    for (const negotiation::Submission& submission : tensor.submissions) {
      lengths.push_back(submission.request.length());
    }
  }
  return lengths;
}

uint64_t TotalBytes(const negotiation::ReadyTensor& tensor) {
  const std::vector<uint64_t> lengths = Lengths(tensor);
  return std::accumulate(lengths.begin(), lengths.end(), uint64_t{0});
}

class Allgather final : public CollectiveOp {
 public:
  uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const override {
    return shm::RoundUp(TotalBytes(tensor), shm::kDataAlignment);
  }

  void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
               WorkList& work) const override {
    // Set rank order: inputs follow each other, and (across nodes, where
    // no rank has joined) a rank's place is the bytes of the ranks before it.
    const std::vector<uint64_t> lengths = Lengths(tensor);
    for (size_t i = 0; i < tensor.submissions.size(); ++i) {
      const negotiation::Submission& submission = tensor.submissions[i];
      const size_t before = tensor.across_nodes ? static_cast<size_t>(submission.set_rank) : i;
      const uint64_t offset = std::accumulate(
          lengths.begin(), lengths.begin() + static_cast<ptrdiff_t>(before), uint64_t{0});
      work.AddCopy(slot + offset, InputOf(submission), submission.request.length());
    }
  }

  RankResult ResultOf(const negotiation::ReadyTensor& tensor, size_t) const override {
    int64_t rows = 0;
    if (tensor.across_nodes) {
      for (const v1::RankRequest& rank : Everyone(tensor)) rows += Dim0(rank.request());
    } else {
      for (const negotiation::Submission& submission : tensor.submissions)
        rows += Dim0(submission.request);
    }
    return {.offset = 0, .bytes = TotalBytes(tensor), .dim0 = rows};
  }

  absl::string_view phase() const override { return kPhaseFusionCopy; }

  void AddTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                    CrossNodeStage& stage) const override {
    const NodeRows blocks = NodeRowsOf(tensor);
    if (blocks.row_bytes == 0 || blocks.total_bytes == 0) return;
    stage.bytes += blocks.total_bytes;
    stage.transfers.push_back([span = tensor.span, slot, blocks](NodeTransport& transport) {
      return transport.StartAllgather(*span, slot, blocks.row_bytes, blocks.rows, blocks.displs);
    });
  }
};

}  // namespace

NodeRows NodeRowsOf(const negotiation::ReadyTensor& tensor) {
  NodeRows blocks;
  blocks.row_bytes = RowBytes(tensor.request());
  const std::vector<uint64_t> lengths = Lengths(tensor);
  blocks.total_bytes = std::accumulate(lengths.begin(), lengths.end(), uint64_t{0});
  if (blocks.row_bytes == 0) return blocks;
  const job::SetSpan& span = Span(tensor);
  blocks.rows.assign(span.nodes.size(), 0);
  blocks.displs.assign(span.nodes.size(), 0);
  uint64_t offset = 0;
  for (int32_t i = 0; i < span.size(); ++i) {
    blocks.displs[i] = offset;
    for (int32_t r = span.first[i]; r < span.first[i] + span.count[i]; ++r) {
      blocks.rows[i] += lengths[r] / blocks.row_bytes;
    }
    offset += blocks.rows[i];
  }
  return blocks;
}

const CollectiveOp& AllgatherOp() {
  static const Allgather op;
  return op;
}

}  // namespace collective::daemon::exec::ops
