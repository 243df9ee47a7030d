// Broadcast: the root's input, copied once into the result that every rank
// reads, and on one node from there, piece by piece, into the outputs that
// ranks name in their own arenas (TensorRequest.output_offset; such a rank
// reads nothing from the result). The other ranks' inputs are never written
// (out-of-place); a rank that wants it in place names its input as the
// output. Across nodes the root's node copies it, MPI_Ibcast sends it to
// the set's other nodes, and on every node it goes from there, block by
// block, into the outputs the ranks name.
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/phases.h"
#include "shm/segment_layout.h"

namespace collective::daemon::exec::ops {
namespace {

class Broadcast final : public CollectiveOp {
 public:
  absl::Status Check(const negotiation::ReadyTensor& tensor) const override {
    return CheckRoot(tensor);
  }

  uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const override {
    return shm::RoundUp(tensor.request().length(), shm::kDataAlignment);
  }

  void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
               WorkList& work) const override {
    // No rank has joined: every rank of the set submitted (here, every
    // local one), so the root is the submission with its set rank.
    const int32_t root = tensor.request().root_rank();
    for (const negotiation::Submission& submission : tensor.submissions) {
      if (submission.set_rank == root) {
        work.AddCopy(slot, InputOf(submission), submission.request.length(),
                     ArenaOutputsOf(tensor));
      }
    }
  }

  RankResult ResultOf(const negotiation::ReadyTensor& tensor, size_t index) const override {
    return {.offset = 0,
            .bytes = tensor.request().length(),
            .dim0 = Dim0(tensor.request()),
            .in_output = NamesOutput(tensor, index)};
  }

  absl::string_view phase() const override { return kPhaseFusionCopy; }

  void AddTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                    CrossNodeStage& stage) const override {
    const uint64_t bytes = tensor.request().length();
    if (bytes == 0) return;
    const job::SetSpan& span = Span(tensor);
    const int root = span.IndexOf(tensor.request().root_rank());
    stage.bytes += bytes;
    stage.transfers.push_back([span = tensor.span, slot, bytes, root](NodeTransport& transport) {
      return transport.StartBroadcast(*span, slot, bytes, root);
    });
    const WorkList::Outputs outputs = NamedOutputsOf(tensor);
    if (!outputs.empty()) stage.after.AddCopy(nullptr, slot, bytes, outputs);
  }
};

}  // namespace

const CollectiveOp& BroadcastOp() {
  static const Broadcast op;
  return op;
}

}  // namespace collective::daemon::exec::ops
