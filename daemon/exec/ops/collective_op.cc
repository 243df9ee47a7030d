#include "daemon/exec/ops/collective_op.h"

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/negotiation/mismatch.h"

namespace collective::daemon::exec::ops {

absl::Status CollectiveOp::Check(const negotiation::ReadyTensor& tensor) const {
  if (!tensor.has_joined_ranks()) return absl::OkStatus();
  return negotiation::RefusedAfterJoin(tensor);
}

const CollectiveOp* OpFor(const v1::TensorRequest& request) {
  switch (request.collective()) {
    case v1::COLLECTIVE_ALLREDUCE:
      return request.op() == v1::REDUCE_OP_ADASUM ? &AdasumAllreduceOp() : &AllreduceOp();
    case v1::COLLECTIVE_REDUCESCATTER:
      return &ReducescatterOp();
    case v1::COLLECTIVE_ALLGATHER:
      return &AllgatherOp();
    case v1::COLLECTIVE_BROADCAST:
      return &BroadcastOp();
    case v1::COLLECTIVE_ALLTOALL:
      return &AlltoallOp();
    case v1::COLLECTIVE_REDUCE:
      return &ReduceOp();
    case v1::COLLECTIVE_GATHER:
      return &GatherOp();
    case v1::COLLECTIVE_SCATTER:
      return &ScatterOp();
    case v1::COLLECTIVE_SEND:
    case v1::COLLECTIVE_RECV:  // a receive alone: its half of a message across nodes
      return &MessageOp();
    default:
      return nullptr;
  }
}

absl::Status CheckRoot(const negotiation::ReadyTensor& tensor) {
  if (tensor.has_joined_ranks()) return negotiation::RefusedAfterJoin(tensor);
  const int32_t root = tensor.request().root_rank();
  if (root >= 0 && root < tensor.set_size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      CollectiveName(tensor.request().collective()), " of '", tensor.name, "': root rank ", root,
      " is not a rank of process set ", tensor.process_set_id, " (size ", tensor.set_size, ")"));
}

const std::byte* InputOf(const negotiation::Submission& submission) {
  return submission.client->segment->arena() + submission.request.offset();
}

std::byte* OutputOf(const negotiation::Submission& submission) {
  return submission.client->segment->arena() + submission.request.output_offset();
}

uint64_t RowBytes(const v1::TensorRequest& request) {
  uint64_t bytes = ElementSize(request.dtype());
  for (int i = 1; i < request.shape_size(); ++i) bytes *= static_cast<uint64_t>(request.shape(i));
  return bytes;
}

int64_t Dim0(const v1::TensorRequest& request) {
  return request.shape_size() > 0 ? request.shape(0) : 0;
}

const std::vector<v1::RankRequest>& Everyone(const negotiation::ReadyTensor& tensor) {
  return *tensor.everyone;
}

const job::SetSpan& Span(const negotiation::ReadyTensor& tensor) { return *tensor.span; }

bool WritesArenaOutputs(const negotiation::ReadyTensor& tensor) {
  return !tensor.across_nodes && tensor.request().memory() == v1::MEMORY_KIND_HOST;
}

WorkList::Outputs ArenaOutputsOf(const negotiation::ReadyTensor& tensor) {
  return WritesArenaOutputs(tensor) ? NamedOutputsOf(tensor) : WorkList::Outputs{};
}

WorkList::Outputs NamedOutputsOf(const negotiation::ReadyTensor& tensor) {
  WorkList::Outputs outputs;
  for (const negotiation::Submission& submission : tensor.submissions) {
    if (NamesOutput(tensor, submission)) outputs.push_back(OutputOf(submission));
  }
  return outputs;
}

bool NamesOutput(const negotiation::ReadyTensor& tensor,
                 const negotiation::Submission& submission) {
  return tensor.request().memory() == v1::MEMORY_KIND_HOST &&
         submission.request.has_output_offset();
}

bool NamesOutput(const negotiation::ReadyTensor& tensor, size_t index) {
  return NamesOutput(tensor, tensor.submissions[index]);
}

void CollectiveOp::PlanAcrossNodes(const FusedBatch& batch, const std::vector<uint64_t>& slots,
                                   const PlanContext& context,
                                   std::vector<CrossNodeStage>& stages) const {
  for (size_t t = 0; t < batch.tensors.size(); ++t) {
    const negotiation::ReadyTensor& tensor = batch.tensors[t];
    std::byte* slot = context.data + slots[t];
    CrossNodeStage& stage = stages.emplace_back(context.zeros);
    stage.tensor = tensor.name;
    AddWork(tensor, slot, stage.before);
    AddTransfers(tensor, slot, stage);
  }
}

}  // namespace collective::daemon::exec::ops
