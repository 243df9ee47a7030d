// Alltoall: rank r sends splits[r][j] rows of its input (the next block, in
// order) to rank j; rank j receives the blocks of every rank in rank order,
// and the count of rows from each. Without splits the first dimension is
// split evenly. Each rank's output and its received splits get their own
// part of the slot.
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/ops/ops.h"
#include "daemon/timeline.h"
#include "shm/segment_layout.h"

namespace collective::daemon::ops {
namespace {

using Splits = std::vector<std::vector<int64_t>>;  // [sender][receiver] rows

// The rows each rank sends to each rank (Check has vouched for them).
Splits EffectiveSplits(const ReadyTensor& tensor) {
  const int32_t size = tensor.set_size;
  Splits splits(size);
  for (const Submission& submission : tensor.submissions) {
    const v1::TensorRequest& request = submission.request;
    std::vector<int64_t>& row = splits[submission.set_rank];
    if (request.splits_size() > 0) {
      row.assign(request.splits().begin(), request.splits().end());
    } else {
      row.assign(size, Dim0(request) / size);
    }
  }
  return splits;
}

// Where receiver j's output and received splits lie in the slot.
struct Part {
  uint64_t data = 0;
  uint64_t bytes = 0;
  int64_t rows = 0;
  uint64_t splits = 0;
};

std::vector<Part> Layout(const ReadyTensor& tensor, const Splits& splits) {
  const int32_t size = tensor.set_size;
  const uint64_t row_bytes = RowBytes(tensor.request());
  std::vector<Part> parts(size);
  uint64_t offset = 0;
  for (int32_t j = 0; j < size; ++j) {
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

class Alltoall final : public CollectiveOp {
 public:
  absl::Status Check(const ReadyTensor& tensor) const override {
    if (absl::Status joined = CollectiveOp::Check(tensor); !joined.ok()) return joined;
    const int32_t size = tensor.set_size;
    for (const Submission& submission : tensor.submissions) {
      const v1::TensorRequest& request = submission.request;
      const int32_t rank = submission.client->topology.rank();
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

  uint64_t SlotBytes(const ReadyTensor& tensor) const override {
    const std::vector<Part> parts = Layout(tensor, EffectiveSplits(tensor));
    const Part& last = parts.back();
    return last.splits + shm::RoundUp(sizeof(int64_t) * static_cast<uint64_t>(tensor.set_size),
                                      shm::kDataAlignment);
  }

  void AddWork(const ReadyTensor& tensor, std::byte* slot, WorkList& work) const override {
    const Splits splits = EffectiveSplits(tensor);
    const std::vector<Part> parts = Layout(tensor, splits);
    const uint64_t row_bytes = RowBytes(tensor.request());
    const int32_t size = tensor.set_size;
    for (int32_t j = 0; j < size; ++j) {
      std::byte* out = slot + parts[j].data;
      auto* received = reinterpret_cast<int64_t*>(slot + parts[j].splits);
      for (int32_t r = 0; r < size; ++r) {
        // Without joined ranks, submissions are indexed by set rank.
        const std::vector<int64_t>& sent = splits[r];
        const int64_t skip = std::accumulate(sent.begin(), sent.begin() + j, int64_t{0});
        const uint64_t bytes = static_cast<uint64_t>(sent[j]) * row_bytes;
        work.AddCopy(out, InputOf(tensor.submissions[r]) + static_cast<uint64_t>(skip) * row_bytes,
                     bytes);
        out += bytes;
        received[r] = sent[j];  // a few words: written here, not as work
      }
    }
  }

  RankResult ResultOf(const ReadyTensor& tensor, size_t index) const override {
    const std::vector<Part> parts = Layout(tensor, EffectiveSplits(tensor));
    const Part& part = parts[tensor.submissions[index].set_rank];
    return {.offset = part.data,
            .bytes = part.bytes,
            .dim0 = part.rows,
            .aux_offset = part.splits,
            .aux_count = static_cast<uint32_t>(tensor.set_size)};
  }

  absl::string_view phase() const override { return kPhaseFusionCopy; }
};

}  // namespace

Splits AlltoallSplits(const ReadyTensor& tensor) { return EffectiveSplits(tensor); }

const CollectiveOp& AlltoallOp() {
  static const Alltoall op;
  return op;
}

}  // namespace collective::daemon::ops
