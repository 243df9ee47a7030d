#include "daemon/gpu/device_aliasing.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "daemon/exec/ops/collective_op.h"

namespace collective::daemon::gpu {
namespace {

// `bytes` from `offset` of a client's registered allocation.
struct Range {
  uint64_t allocation = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

Range InputOf(const v1::TensorRequest& request) {
  return {request.device_input().allocation_id(), request.device_input().offset(),
          request.length()};
}

bool Overlap(const Range& a, const Range& b) {
  return a.bytes > 0 && b.bytes > 0 && a.allocation == b.allocation &&
         a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

std::string Describe(const Range& span) {
  return absl::StrCat(span.bytes, " bytes at offset ", span.offset, " of allocation ",
                      span.allocation);
}

const negotiation::Submission* RootOf(const negotiation::ReadyTensor& tensor) {
  for (const negotiation::Submission& submission : tensor.submissions) {
    if (submission.set_rank == tensor.request().root_rank()) return &submission;
  }
  return nullptr;
}

absl::Status CheckScatter(const negotiation::ReadyTensor& tensor) {
  const negotiation::Submission* root = RootOf(tensor);
  if (root == nullptr) return absl::OkStatus();
  const v1::TensorRequest& request = root->request;
  const Range input = InputOf(request);
  const Range output{request.device_output().allocation_id(), request.device_output().offset(),
                     static_cast<uint64_t>(request.receive_rows()) * exec::ops::RowBytes(request)};
  if (!Overlap(input, output)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "scatter of '", tensor.name, "': root rank ", root->rank, "'s output (", Describe(output),
      ") overlaps its input (", Describe(input),
      "): its rows would overwrite rows the other ranks still receive; give the root an output "
      "of its own"));
}

absl::Status CheckGather(const negotiation::ReadyTensor& tensor) {
  const negotiation::Submission* root = RootOf(tensor);
  if (root == nullptr) return absl::OkStatus();
  uint64_t before = 0;  // the bytes of the ranks before the root
  uint64_t total = 0;
  for (const negotiation::Submission& submission : tensor.submissions) {
    if (submission.set_rank < root->set_rank) before += submission.request.length();
    total += submission.request.length();
  }
  const v1::TensorRequest& request = root->request;
  const Range input = InputOf(request);
  const Range output{request.device_output().allocation_id(), request.device_output().offset(),
                     total};
  if (!Overlap(input, output) || input.offset == output.offset + before) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "gather of '", tensor.name, "': root rank ", root->rank, "'s input (", Describe(input),
      ") overlaps its output (", Describe(output), ") other than at its own rows' place (offset ",
      output.offset + before, "): the other ranks' rows would overwrite it while it is read"));
}

// submissions[0] sends, [1] receives (exec/ops/message.cc).
absl::Status CheckMessage(const negotiation::ReadyTensor& tensor) {
  const negotiation::Submission& send = tensor.submissions[0];
  const negotiation::Submission& receive = tensor.submissions[1];
  if (send.client != receive.client) return absl::OkStatus();
  const Range input = InputOf(send.request);
  const Range output{receive.request.device_output().allocation_id(),
                     receive.request.device_output().offset(), receive.request.length()};
  if (!Overlap(input, output) || input.offset == output.offset) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the ", tensor.name, ": rank ", send.rank, " receives into ", Describe(output),
                   ", which partly overlaps what it sends (", Describe(input),
                   "); receive into a separate buffer"));
}

}  // namespace

absl::Status CheckAliasing(const negotiation::ReadyTensor& tensor) {
  switch (tensor.request().collective()) {
    case v1::COLLECTIVE_SCATTER:
      return CheckScatter(tensor);
    case v1::COLLECTIVE_GATHER:
      return CheckGather(tensor);
    case v1::COLLECTIVE_SEND:
    case v1::COLLECTIVE_RECV:
      return tensor.across_nodes ? absl::OkStatus() : CheckMessage(tensor);
    default:
      return absl::OkStatus();
  }
}

}  // namespace collective::daemon::gpu
