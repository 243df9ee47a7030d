// Broadcast: the root's input, copied once into the result that every rank
// reads. The other ranks' inputs are never written (out-of-place); a rank
// that wants it in place names its input as the output.
#include "absl/strings/str_cat.h"
#include "daemon/ops/ops.h"
#include "daemon/timeline.h"
#include "shm/segment_layout.h"

namespace collective::daemon::ops {
namespace {

class Broadcast final : public CollectiveOp {
 public:
  absl::Status Check(const ReadyTensor& tensor) const override {
    if (absl::Status joined = CollectiveOp::Check(tensor); !joined.ok()) return joined;
    const int32_t root = tensor.request().root_rank();
    if (root < 0 || root >= tensor.set_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "broadcast of '", tensor.name, "': root rank ", root, " is not a rank of process set ",
          tensor.process_set_id, " (size ", tensor.set_size, ")"));
    }
    return absl::OkStatus();
  }

  uint64_t SlotBytes(const ReadyTensor& tensor) const override {
    return shm::RoundUp(tensor.request().length(), shm::kDataAlignment);
  }

  void AddWork(const ReadyTensor& tensor, std::byte* slot, WorkList& work) const override {
    // Without joined ranks, submissions are indexed by set rank.
    const Submission& root = tensor.submissions[tensor.request().root_rank()];
    work.AddCopy(slot, InputOf(root), root.request.length());
  }

  RankResult ResultOf(const ReadyTensor& tensor, size_t) const override {
    return {.offset = 0, .bytes = tensor.request().length(), .dim0 = Dim0(tensor.request())};
  }

  absl::string_view phase() const override { return kPhaseFusionCopy; }
};

}  // namespace

const CollectiveOp& BroadcastOp() {
  static const Broadcast op;
  return op;
}

}  // namespace collective::daemon::ops
