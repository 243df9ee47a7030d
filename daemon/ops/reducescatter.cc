// Reducescatter: the inputs are reduced as by allreduce, and rank r reads its
// block of rows. With an uneven first dimension the first (dim0 mod size)
// ranks get one row more, as in Horovod.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/ops/ops.h"
#include "daemon/timeline.h"
#include "shm/segment_layout.h"

namespace collective::daemon::ops {
namespace {

class Reducescatter final : public CollectiveOp {
 public:
  uint64_t SlotBytes(const ReadyTensor& tensor) const override {
    return shm::RoundUp(tensor.request().length(), shm::kDataAlignment);
  }

  void AddWork(const ReadyTensor& tensor, std::byte* slot, WorkList& work) const override {
    AddReduction(tensor, slot, work);
  }

  RankResult ResultOf(const ReadyTensor& tensor, size_t index) const override {
    const int64_t rows = Dim0(tensor.request());
    const int64_t size = tensor.set_size;
    const int64_t rank = tensor.submissions[index].set_rank;
    const int64_t base = rows / size;
    const int64_t extra = rows % size;
    const int64_t count = base + (rank < extra ? 1 : 0);
    const int64_t first = rank * base + std::min(rank, extra);
    const uint64_t row_bytes = RowBytes(tensor.request());
    return {.offset = static_cast<uint64_t>(first) * row_bytes,
            .bytes = static_cast<uint64_t>(count) * row_bytes,
            .dim0 = count};
  }

  absl::string_view phase() const override { return kPhaseReduce; }
};

}  // namespace

const CollectiveOp& ReducescatterOp() {
  static const Reducescatter op;
  return op;
}

}  // namespace collective::daemon::ops
