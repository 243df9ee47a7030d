// Alltoall: rank r sends splits[r][j] rows of its input (the next block, in
// order) to rank j; rank j receives the blocks of every rank in rank order,
// and the count of rows from each. Without splits the first dimension is
// split evenly. Each rank's output and its received splits get their own
// part of the slot.
//
// Across nodes the slot holds only this node's receivers' parts, and one
// MPI_Ialltoallw among the set's nodes moves every block, node-aggregated:
// MPI reads each block from its sender's arena and writes it at its place
// in the receiver's part, with no staging copy on either side.
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/phases.h"
#include "shm/segment_layout.h"

namespace collective::daemon::exec::ops {
namespace {

using Splits = std::vector<std::vector<int64_t>>;  // [sender][receiver] rows

std::vector<int64_t> SplitsOf(const v1::TensorRequest& request, int32_t size) {
  if (request.splits_size() > 0) return {request.splits().begin(), request.splits().end()};
  return std::vector<int64_t>(static_cast<size_t>(size), Dim0(request) / size);
}

// The rows each rank sends to each rank (Check has vouched for them).
Splits EffectiveSplits(const negotiation::ReadyTensor& tensor) {
  const int32_t size = tensor.set_size;
  Splits splits(size);
  if (tensor.across_nodes) {
    for (const v1::RankRequest& rank : Everyone(tensor)) {
      splits[rank.set_rank()] = SplitsOf(rank.request(), size);
    }
  } else {
    for (const negotiation::Submission& submission : tensor.submissions) {
      splits[submission.set_rank] = SplitsOf(submission.request, size);
    }
  }
  return splits;
}

// The receivers whose parts this node's slot holds: every rank on one node,
// this node's ranks across nodes.
std::pair<int32_t, int32_t> Receivers(const negotiation::ReadyTensor& tensor) {
  if (!tensor.across_nodes) return {0, tensor.set_size};
  const job::SetSpan& span = Span(tensor);
  return {span.first[span.index], span.first[span.index] + span.count[span.index]};
}

// Where receiver j's output and received splits lie in the slot.
struct Part {
  uint64_t data = 0;
  uint64_t bytes = 0;
  int64_t rows = 0;
  uint64_t splits = 0;
};

// By receiver; only the receivers of this slot have a place.
std::vector<Part> Layout(const negotiation::ReadyTensor& tensor, const Splits& splits) {
  const int32_t size = tensor.set_size;
  const uint64_t row_bytes = RowBytes(tensor.request());
  const auto [first, end] = Receivers(tensor);
  std::vector<Part> parts(size);
  uint64_t offset = 0;
  for (int32_t j = first; j < end; ++j) {
    Part& part = parts[j];
    for (int32_t r = 0; r < size; ++r) part.rows += splits[r][j];
    part.data = offset;
    part.bytes = static_cast<uint64_t>(part.rows) * row_bytes;
    offset += shm::RoundUp(part.bytes, shm::kDataAlignment);
    part.splits = offset;
    offset += shm::RoundUp(sizeof(int64_t) * static_cast<uint64_t>(size), shm::kDataAlignment);
  }
  return parts;
}

// Rows rank `sender` sends before its block for `receiver`.
int64_t SentBefore(const Splits& splits, int32_t sender, int32_t receiver) {
  const std::vector<int64_t>& sent = splits[sender];
  return std::accumulate(sent.begin(), sent.begin() + receiver, int64_t{0});
}

// Rows receiver `receiver` gets from the ranks before `sender`.
int64_t ReceivedBefore(const Splits& splits, int32_t sender, int32_t receiver) {
  int64_t rows = 0;
  for (int32_t r = 0; r < sender; ++r) rows += splits[r][receiver];
  return rows;
}

class Alltoall final : public CollectiveOp {
 public:
  absl::Status Check(const negotiation::ReadyTensor& tensor) const override {
    if (absl::Status joined = CollectiveOp::Check(tensor); !joined.ok()) return joined;
    const int32_t size = tensor.set_size;
    for (const negotiation::Submission& submission : tensor.submissions) {
      const v1::TensorRequest& request = submission.request;
      const int32_t rank = submission.rank;
      if (request.splits_size() == 0) {
        if (Dim0(request) % size != 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("alltoall of '", tensor.name, "': rank ", rank, "'s first dimension ",
                           Dim0(request), " does not divide evenly among ", size,
                           " ranks; pass splits to say how many rows go to each rank"));
        }
      } else if (request.splits_size() != size) {
        return absl::InvalidArgumentError(
            absl::StrCat("alltoall of '", tensor.name, "': rank ", rank, " sent ",
                         request.splits_size(), " splits for a process set of ", size, " ranks"));
      }
    }
    return absl::OkStatus();
  }

  uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const override {
    const std::vector<Part> parts = Layout(tensor, EffectiveSplits(tensor));
    const int32_t last = Receivers(tensor).second - 1;
    return parts[last].splits +
           shm::RoundUp(sizeof(int64_t) * static_cast<uint64_t>(tensor.set_size),
                        shm::kDataAlignment);
  }

  void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
               WorkList& work) const override {
    const Splits splits = EffectiveSplits(tensor);
    const std::vector<Part> parts = Layout(tensor, splits);
    const uint64_t row_bytes = RowBytes(tensor.request());
    const int32_t size = tensor.set_size;
    const auto [first, end] = Receivers(tensor);
    for (int32_t j = first; j < end; ++j) {
      auto* received = reinterpret_cast<int64_t*>(slot + parts[j].splits);
      for (int32_t r = 0; r < size; ++r) received[r] = splits[r][j];  // a few words, not work
      if (tensor.across_nodes) continue;                              // the exchange moves the rows
      std::byte* out = slot + parts[j].data;
      for (int32_t r = 0; r < size; ++r) {
        // Without joined ranks, submissions are indexed by set rank.
        const uint64_t skip = static_cast<uint64_t>(SentBefore(splits, r, j)) * row_bytes;
        const uint64_t bytes = static_cast<uint64_t>(splits[r][j]) * row_bytes;
        work.AddCopy(out, InputOf(tensor.submissions[r]) + skip, bytes);
        out += bytes;
      }
    }
  }

  RankResult ResultOf(const negotiation::ReadyTensor& tensor, size_t index) const override {
    const std::vector<Part> parts = Layout(tensor, EffectiveSplits(tensor));
    const Part& part = parts[tensor.submissions[index].set_rank];
    return {.offset = part.data,
            .bytes = part.bytes,
            .dim0 = part.rows,
            .aux_offset = part.splits,
            .aux_count = static_cast<uint32_t>(tensor.set_size)};
  }

  absl::string_view phase() const override { return kPhaseFusionCopy; }

  // Blocks go in the order (sender ascending, receiver ascending) on both
  // sides, so that what node i lists for node j is what node j lists from
  // node i.
  void AddTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                    CrossNodeStage& stage) const override {
    const uint64_t row_bytes = RowBytes(tensor.request());
    if (row_bytes == 0) return;
    const Splits splits = EffectiveSplits(tensor);
    const std::vector<Part> parts = Layout(tensor, splits);
    const job::SetSpan& span = Span(tensor);
    const auto [mine_first, mine_end] = Receivers(tensor);
    std::vector<std::vector<RowBlock>> send(span.nodes.size());
    std::vector<std::vector<RowBlock>> receive(span.nodes.size());
    for (int32_t node = 0; node < span.size(); ++node) {
      const int32_t theirs_first = span.first[node];
      const int32_t theirs_end = theirs_first + span.count[node];
      for (const negotiation::Submission& submission : tensor.submissions) {
        const int32_t i = submission.set_rank;
        for (int32_t j = theirs_first; j < theirs_end; ++j) {
          const uint64_t skip = static_cast<uint64_t>(SentBefore(splits, i, j)) * row_bytes;
          send[node].push_back({InputOf(submission) + skip, static_cast<uint64_t>(splits[i][j])});
          stage.bytes += static_cast<uint64_t>(splits[i][j]) * row_bytes;
        }
      }
      for (int32_t i = theirs_first; i < theirs_end; ++i) {
        for (int32_t j = mine_first; j < mine_end; ++j) {
          const uint64_t at =
              parts[j].data + static_cast<uint64_t>(ReceivedBefore(splits, i, j)) * row_bytes;
          receive[node].push_back({slot + at, static_cast<uint64_t>(splits[i][j])});
        }
      }
    }
    stage.transfers.push_back(
        [span = tensor.span, row_bytes, send, receive](NodeTransport& transport) {
          return transport.StartExchange(*span, row_bytes, send, receive);
        });
  }
};

}  // namespace

Splits AlltoallSplits(const negotiation::ReadyTensor& tensor) { return EffectiveSplits(tensor); }

const CollectiveOp& AlltoallOp() {
  static const Alltoall op;
  return op;
}

}  // namespace collective::daemon::exec::ops
