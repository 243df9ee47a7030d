// Allgather: every rank's input, in rank order, concatenated along the first
// dimension (which may differ per rank) into one result that every rank reads.
#include "daemon/ops/ops.h"
#include "daemon/timeline.h"
#include "shm/segment_layout.h"

namespace collective::daemon::ops {
namespace {

class Allgather final : public CollectiveOp {
 public:
  uint64_t SlotBytes(const ReadyTensor& tensor) const override {
    return shm::RoundUp(TotalBytes(tensor), shm::kDataAlignment);
  }

  void AddWork(const ReadyTensor& tensor, std::byte* slot, WorkList& work) const override {
    uint64_t offset = 0;
    for (const Submission& submission : tensor.submissions) {
      work.AddCopy(slot + offset, InputOf(submission), submission.request.length());
      offset += submission.request.length();
    }
  }

  RankResult ResultOf(const ReadyTensor& tensor, size_t) const override {
    int64_t rows = 0;
    for (const Submission& submission : tensor.submissions) rows += Dim0(submission.request);
    return {.offset = 0, .bytes = TotalBytes(tensor), .dim0 = rows};
  }

  absl::string_view phase() const override { return kPhaseFusionCopy; }

 private:
  static uint64_t TotalBytes(const ReadyTensor& tensor) {
    uint64_t bytes = 0;
    for (const Submission& submission : tensor.submissions) bytes += submission.request.length();
    return bytes;
  }
};

}  // namespace

const CollectiveOp& AllgatherOp() {
  static const Allgather op;
  return op;
}

}  // namespace collective::daemon::ops
