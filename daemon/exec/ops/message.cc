// A point-to-point message: a matched send and receive (message_matcher.h;
// submissions[0] is the send, [1] the receive). The sender's bytes are
// copied once, straight from its arena into the receiver's result: the
// output the receive names in its own arena (TensorRequest.output_offset),
// else the tensor's slot in the result segment. The sender's result is
// empty. Between ranks of different nodes each daemon runs its own half
// alone (submissions[0] is the local send or receive): the transport moves
// the bytes (engine_messages.cc), this op only sizes the receiver's slot and
// describes each half's result.
#include "absl/strings/str_cat.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/phases.h"
#include "shm/segment_layout.h"

namespace collective::daemon::exec::ops {
namespace {

const negotiation::Submission& SendOf(const negotiation::ReadyTensor& tensor) {
  return tensor.submissions[0];
}

const negotiation::Submission& ReceiveOf(const negotiation::ReadyTensor& tensor) {
  return tensor.submissions[1];
}

// Whether the receiver's bytes go straight into the output its request
// names. Not when a rank sends to itself into a range that overlaps the
// send's input: the pieces of one copy run on several threads, so source and
// destination must not overlap; such a message goes through the slot.
bool WritesOutput(const negotiation::ReadyTensor& tensor) {
  const negotiation::Submission& send = SendOf(tensor);
  const negotiation::Submission& receive = ReceiveOf(tensor);
  if (!receive.request.has_output_offset()) return false;
  if (send.client != receive.client) return true;
  const uint64_t length = send.request.length();
  const uint64_t input = send.request.offset();
  const uint64_t output = receive.request.output_offset();
  return output + length <= input || input + length <= output;
}

class Message final : public CollectiveOp {
 public:
  // Only the two ranks take part: the set's other ranks, joined or not, do
  // not matter.
  absl::Status Check(const negotiation::ReadyTensor& tensor) const override {
    if (tensor.submissions.size() != (tensor.across_nodes ? 1 : 2)) {
      return absl::InternalError(absl::StrCat("the ", tensor.name,
                                              " is not a send and a receive on one node, nor one "
                                              "half of a message across nodes"));
    }
    return absl::OkStatus();
  }

  uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const override {
    if (tensor.across_nodes) {
      const v1::TensorRequest& local = tensor.submissions.front().request;
      return local.collective() == v1::COLLECTIVE_SEND || local.has_output_offset()
                 ? 0
                 : shm::RoundUp(local.length(), shm::kDataAlignment);
    }
    if (WritesOutput(tensor)) return 0;
    return shm::RoundUp(SendOf(tensor).request.length(), shm::kDataAlignment);
  }

  void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
               WorkList& work) const override {
    const negotiation::Submission& receive = ReceiveOf(tensor);
    std::byte* destination = WritesOutput(tensor) ? OutputOf(receive) : slot;
    const std::byte* source = InputOf(SendOf(tensor));
    work.AddCopy(destination, source, SendOf(tensor).request.length());
  }

  RankResult ResultOf(const negotiation::ReadyTensor& tensor, size_t index) const override {
    if (tensor.across_nodes) {
      const v1::TensorRequest& local = tensor.submissions.front().request;
      if (local.collective() == v1::COLLECTIVE_SEND) return {};
      return {.offset = 0,
              .bytes = local.length(),
              .dim0 = Dim0(local),
              .in_output = local.has_output_offset()};
    }
    if (index == 0) return {};
    const v1::TensorRequest& receive = ReceiveOf(tensor).request;
    return {.offset = 0,
            .bytes = receive.length(),
            .dim0 = Dim0(receive),
            .in_output = WritesOutput(tensor)};
  }

  absl::string_view phase() const override { return kPhaseFusionCopy; }

  void AddTransfers(const negotiation::ReadyTensor&, std::byte*, CrossNodeStage&) const override {}
};

}  // namespace

const CollectiveOp& MessageOp() {
  static const Message op;
  return op;
}

}  // namespace collective::daemon::exec::ops
