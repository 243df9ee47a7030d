// Scatter: the root's rows split among the ranks in rank order, rank r
// receiving its request's receive_rows (mismatch.cc checked that they add
// up to the root's rows). Each row moves once on a node: from the root's
// input straight into the receiver's output in its own arena when its
// request names one (output_offset), else into the receiver's part of the
// slot, which it reads. Across nodes the slot holds this node's receivers'
// parts (consecutive set ranks: one block of the root's rows), and one
// MPI_Ialltoallw among the set's nodes, in which only the root's node
// sends, moves every other node's block from the root's arena into that
// node's slot (a scatterv by the exchange that alltoall uses), from where
// a receiver that names an output gets its rows copied there.
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/phases.h"
#include "shm/segment_layout.h"

namespace collective::daemon::exec::ops {
namespace {

// The rows every rank of the set receives, by set rank.
std::vector<int64_t> RowsOf(const negotiation::ReadyTensor& tensor) {
  std::vector<int64_t> rows(static_cast<size_t>(tensor.set_size), 0);
  if (tensor.across_nodes) {
    for (const v1::RankRequest& rank : Everyone(tensor)) {
      rows[rank.set_rank()] = rank.request().receive_rows();
    }
  } else {
    for (const negotiation::Submission& submission : tensor.submissions) {
      rows[submission.set_rank] = submission.request.receive_rows();
    }
  }
  return rows;
}

int64_t RowsBefore(const std::vector<int64_t>& rows, int32_t rank) {
  return std::accumulate(rows.begin(), rows.begin() + rank, int64_t{0});
}

// The set ranks whose parts this node's slot holds.
std::pair<int32_t, int32_t> Receivers(const negotiation::ReadyTensor& tensor) {
  if (!tensor.across_nodes) return {0, tensor.set_size};
  const job::SetSpan& span = Span(tensor);
  return {span.first[span.index], span.first[span.index] + span.count[span.index]};
}

// The root's submission, when the root is on this node.
const negotiation::Submission* RootOf(const negotiation::ReadyTensor& tensor) {
  for (const negotiation::Submission& submission : tensor.submissions) {
    if (submission.set_rank == tensor.request().root_rank()) return &submission;
  }
  return nullptr;
}

class Scatter final : public CollectiveOp {
 public:
  // The root's own rows written over its input would overwrite rows that
  // the other ranks' copies still read, whatever order the pieces run in.
  absl::Status Check(const negotiation::ReadyTensor& tensor) const override {
    RETURN_IF_ERROR(CheckRoot(tensor));
    const negotiation::Submission* root = RootOf(tensor);
    if (root == nullptr || !NamesOutput(tensor, *root)) return absl::OkStatus();
    const v1::TensorRequest& request = root->request;
    const uint64_t out = request.output_offset();
    const uint64_t bytes = static_cast<uint64_t>(request.receive_rows()) * RowBytes(request);
    if (out < request.offset() + request.length() && request.offset() < out + bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scatter of '", tensor.name, "': root rank ", root->rank, "'s output (arena offset ", out,
          ", ", bytes, " bytes) overlaps its input (offset ", request.offset(), ", ",
          request.length(),
          " bytes): its rows would overwrite rows the other ranks still receive"));
    }
    return absl::OkStatus();
  }

  uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const override {
    const std::vector<int64_t> rows = RowsOf(tensor);
    const auto [first, end] = Receivers(tensor);
    const int64_t mine = RowsBefore(rows, end) - RowsBefore(rows, first);
    return shm::RoundUp(static_cast<uint64_t>(mine) * RowBytes(tensor.request()),
                        shm::kDataAlignment);
  }

  void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
               WorkList& work) const override {
    const negotiation::Submission* root = RootOf(tensor);
    if (root == nullptr) return;  // across nodes: the exchange brings this node's rows
    const std::vector<int64_t> rows = RowsOf(tensor);
    const uint64_t row_bytes = RowBytes(tensor.request());
    const int32_t first = Receivers(tensor).first;
    // Without joined ranks (Check), the submissions are this slot's receivers.
    for (const negotiation::Submission& submission : tensor.submissions) {
      const int32_t rank = submission.set_rank;
      std::byte* to =
          NamesOutput(tensor, submission)
              ? OutputOf(submission)
              : slot + static_cast<uint64_t>(RowsBefore(rows, rank) - RowsBefore(rows, first)) *
                           row_bytes;
      work.AddCopy(to, InputOf(*root) + static_cast<uint64_t>(RowsBefore(rows, rank)) * row_bytes,
                   static_cast<uint64_t>(rows[rank]) * row_bytes);
    }
  }

  RankResult ResultOf(const negotiation::ReadyTensor& tensor, size_t index) const override {
    const negotiation::Submission& submission = tensor.submissions[index];
    const std::vector<int64_t> rows = RowsOf(tensor);
    const int32_t rank = submission.set_rank;
    const int64_t before = RowsBefore(rows, rank) - RowsBefore(rows, Receivers(tensor).first);
    const uint64_t row_bytes = RowBytes(tensor.request());
    return {.offset = static_cast<uint64_t>(before) * row_bytes,
            .bytes = static_cast<uint64_t>(rows[rank]) * row_bytes,
            .dim0 = rows[rank],
            .in_output = NamesOutput(tensor, submission)};
  }

  absl::string_view phase() const override { return kPhaseFusionCopy; }

  void AddTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                    CrossNodeStage& stage) const override {
    const uint64_t row_bytes = RowBytes(tensor.request());
    if (row_bytes == 0) return;
    const std::vector<int64_t> rows = RowsOf(tensor);
    const job::SetSpan& span = Span(tensor);
    const int32_t sender = span.IndexOf(tensor.request().root_rank());
    const auto block_of = [&](int32_t node) {
      const int32_t first = span.first[node];
      return std::pair<int64_t, int64_t>{
          RowsBefore(rows, first),
          RowsBefore(rows, first + span.count[node]) - RowsBefore(rows, first)};
    };
    std::vector<std::vector<RowBlock>> send(span.nodes.size());
    std::vector<std::vector<RowBlock>> receive(span.nodes.size());
    if (span.index == sender) {
      const std::byte* input = InputOf(*RootOf(tensor));
      for (int32_t node = 0; node < span.size(); ++node) {
        if (node == sender) continue;  // AddWork copied this node's block
        const auto [before, count] = block_of(node);
        send[node].push_back(
            {input + static_cast<uint64_t>(before) * row_bytes, static_cast<uint64_t>(count)});
        stage.bytes += static_cast<uint64_t>(count) * row_bytes;
      }
    } else {
      const uint64_t count = static_cast<uint64_t>(block_of(span.index).second);
      receive[sender].push_back({slot, count});
      stage.bytes += count * row_bytes;
      for (size_t i = 0; i < tensor.submissions.size(); ++i) {
        if (!NamesOutput(tensor, i)) continue;
        const RankResult part = ResultOf(tensor, i);
        stage.after.AddCopy(OutputOf(tensor.submissions[i]), slot + part.offset, part.bytes);
      }
    }
    stage.transfers.push_back(
        [span = tensor.span, row_bytes, send, receive](NodeTransport& transport) {
          return transport.StartExchange(*span, row_bytes, send, receive);
        });
  }
};

}  // namespace

const CollectiveOp& ScatterOp() {
  static const Scatter op;
  return op;
}

}  // namespace collective::daemon::exec::ops
