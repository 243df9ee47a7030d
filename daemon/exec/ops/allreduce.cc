// Allreduce: every rank's input reduced, in rank order, into one result that
// every rank reads. Ranks that have joined contribute zeros. Across nodes,
// each node reduces its own ranks' inputs, the nodes combine their partial
// results with MPI in chunks — the local reduction of one chunk overlapping
// the transfer of the one before — and each chunk then gets its final scale.
// A small cached one is combined by node 0 as it decides (each node's part
// came with its announcement): every node copies the combination into its
// slot and scales it, with no transfer. A rank that names an output in its
// own arena (TensorRequest.output_offset) gets its result there, on one
// node as it is reduced and across nodes as each chunk gets its final
// scale, copied from the slot.
#include <algorithm>

#include "common/dtype.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/phases.h"
#include "shm/segment_layout.h"

namespace collective::daemon::exec::ops {
namespace {

// The combination of `count` elements at `data` among the set's nodes: an
// allreduce, or a reduce into the node at place `root_node`.
void AddCombination(const negotiation::ReadyTensor& tensor, std::byte* data, uint64_t count,
                    int32_t root_node, CrossNodeStage& stage) {
  const v1::TensorRequest& request = tensor.request();
  const v1::DataType dtype = request.dtype();
  // Average divides after the sum, in the final scale.
  const v1::ReduceOp op = request.op() == v1::REDUCE_OP_AVERAGE ? v1::REDUCE_OP_SUM : request.op();
  std::shared_ptr<const job::SetSpan> span = tensor.span;
  stage.bytes += count * ElementSize(dtype);
  stage.transfers.push_back([span, data, count, dtype, op, root_node](NodeTransport& transport) {
    return root_node == kEveryNode
               ? transport.StartAllreduce(*span, data, count, dtype, op)
               : transport.StartReduce(*span, data, count, dtype, op, root_node);
  });
}

v1::ReduceOp CombiningOp(const v1::TensorRequest& request) {
  return request.op() == v1::REDUCE_OP_AVERAGE ? v1::REDUCE_OP_SUM : request.op();
}

// A host-memory allreduce the kernels reduce element by element, with data.
bool Combinable(const v1::TensorRequest& request) {
  return request.collective() == v1::COLLECTIVE_ALLREDUCE &&
         request.memory() == v1::MEMORY_KIND_HOST && request.length() > 0 &&
         IsReducible(request.dtype(), CombiningOp(request));
}

// Node 0 combined the batch's tensors as it decided: their results arrived
// with the decision.
void PlanCombined(const FusedBatch& batch, const std::vector<uint64_t>& slots,
                  const PlanContext& context, std::vector<CrossNodeStage>& stages) {
  for (size_t t = 0; t < batch.tensors.size(); ++t) {
    const negotiation::ReadyTensor& tensor = batch.tensors[t];
    const v1::TensorRequest& request = tensor.request();
    std::byte* slot = context.data + slots[t];
    CrossNodeStage& stage = stages.emplace_back(context.zeros);
    stage.tensor = tensor.name;
    stage.before.AddCopy(slot, reinterpret_cast<const std::byte*>(tensor.combined->data()),
                         request.length());
    AddFinalScaleRange(tensor, slot, stage.after, 0,
                       request.length() / ElementSize(request.dtype()), NamedOutputsOf(tensor));
  }
}

class Allreduce final : public CollectiveOp {
 public:
  // Ranks that have joined contribute zeros.
  absl::Status Check(const negotiation::ReadyTensor&) const override { return absl::OkStatus(); }

  uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) const override {
    return shm::RoundUp(tensor.request().length(), shm::kDataAlignment);
  }

  void AddWork(const negotiation::ReadyTensor& tensor, std::byte* slot,
               WorkList& work) const override {
    // Across nodes this is the node's partial result, which no output may
    // see (PlanAcrossNodes writes them once the combination is in). Where
    // every rank takes its result from its own output, the slot would be
    // written and never read: the blocks go through scratch memory.
    const WorkList::Outputs outputs = ArenaOutputsOf(tensor);
    const bool slot_unread = !outputs.empty() && outputs.size() == tensor.submissions.size();
    AddReduction(tensor, slot_unread ? nullptr : slot, work, outputs);
  }

  RankResult ResultOf(const negotiation::ReadyTensor& tensor, size_t index) const override {
    return {.offset = 0,
            .bytes = tensor.request().length(),
            .dim0 = Dim0(tensor.request()),
            .in_output = NamesOutput(tensor, index)};
  }

  absl::string_view phase() const override { return kPhaseReduce; }

  void AddTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                    CrossNodeStage& stage) const override {
    AddReductionTransfers(tensor, slot, stage, kEveryNode, NamedOutputsOf);
  }

  void PlanAcrossNodes(const FusedBatch& batch, const std::vector<uint64_t>& slots,
                       const PlanContext& context,
                       std::vector<CrossNodeStage>& stages) const override {
    if (batch.tensors.front().combined != nullptr) {
      return PlanCombined(batch, slots, context, stages);
    }
    PlanReductionAcrossNodes(batch, slots, context, stages, kEveryNode, NamedOutputsOf);
  }
};

}  // namespace

void AddReductionTransfers(const negotiation::ReadyTensor& tensor, std::byte* slot,
                           CrossNodeStage& stage, int32_t root_node, ResultOutputs outputs_of) {
  const v1::TensorRequest& request = tensor.request();
  const uint64_t count = request.length() / ElementSize(request.dtype());
  AddCombination(tensor, slot, count, root_node, stage);
  AddFinalScaleRange(tensor, slot, stage.after, 0, count, outputs_of(tensor));
}

// The fused block is one array of one dtype (fusion joins only tensors of
// the same dtype, op and scale, and slots are aligned to a multiple of
// every element size): it is combined in chunks, slot padding included,
// whatever tensors the chunks cut.
void PlanReductionAcrossNodes(const FusedBatch& batch, const std::vector<uint64_t>& slots,
                              const PlanContext& context, std::vector<CrossNodeStage>& stages,
                              int32_t root_node, ResultOutputs outputs_of) {
  const negotiation::ReadyTensor& head = batch.tensors.front();
  const uint64_t element = ElementSize(head.request().dtype());
  const uint64_t total = batch.bytes / element;
  const uint64_t chunk = std::max<uint64_t>(1, context.chunk_bytes / element);
  std::byte* block = context.data + slots.front();
  // The outputs, by tensor: each chunk's final stage fills them.
  std::vector<WorkList::Outputs> outputs(batch.tensors.size());
  for (size_t t = 0; t < batch.tensors.size(); ++t) outputs[t] = outputs_of(batch.tensors[t]);
  for (uint64_t first = 0; first < total; first += chunk) {
    const uint64_t end = std::min(total, first + chunk);
    CrossNodeStage& stage = stages.emplace_back(context.zeros);
    stage.tensor = head.name;
    for (size_t t = 0; t < batch.tensors.size(); ++t) {
      const negotiation::ReadyTensor& tensor = batch.tensors[t];
      const uint64_t start = (slots[t] - slots.front()) / element;
      const uint64_t length = tensor.request().length() / element;
      const uint64_t low = std::max(first, start);
      const uint64_t high = std::min(end, start + length);
      if (low >= high) continue;
      std::byte* slot = context.data + slots[t];
      AddReductionRange(tensor, slot, stage.before, low - start, high - low);
      AddFinalScaleRange(tensor, slot, stage.after, low - start, high - low, outputs[t]);
    }
    AddCombination(head, block + first * element, end - first, root_node, stage);
  }
}

bool CombinedByNodeZero(const v1::TensorRequest& request, uint64_t max_bytes) {
  return Combinable(request) && request.length() <= max_bytes;
}

std::string NodePart(const negotiation::ReadyTensor& tensor, const std::byte* zeros) {
  std::string part(tensor.request().length(), '\0');
  WorkList work(zeros);
  AddReduction(tensor, reinterpret_cast<std::byte*>(part.data()), work);
  for (size_t i = 0; i < work.size(); ++i) work.Run(i);
  return part;
}

std::optional<std::string> CombineNodeParts(const std::vector<v1::RankRequest>& everyone,
                                            const std::vector<const std::string*>& parts) {
  if (everyone.empty() || parts.empty()) return std::nullopt;
  const v1::TensorRequest& request = everyone.front().request();
  if (!Combinable(request)) return std::nullopt;
  std::vector<const void*> inputs;
  for (const std::string* part : parts) {
    if (part->size() != request.length()) return std::nullopt;
    inputs.push_back(part->data());
  }
  std::string combined(request.length(), '\0');
  Reduce({.dtype = request.dtype(), .op = CombiningOp(request)}, inputs, combined.data(),
         request.length() / ElementSize(request.dtype()));
  return combined;
}

exec::ReduceSpec ReductionSpec(const negotiation::ReadyTensor& tensor) {
  const v1::TensorRequest& request = tensor.request();
  exec::ReduceSpec spec;
  spec.dtype = request.dtype();
  spec.op = request.op();
  if (spec.op == v1::REDUCE_OP_AVERAGE) {
    spec.op = v1::REDUCE_OP_SUM;
    spec.divisor = tensor.set_size;
  }
  spec.prescale = request.has_prescale() ? request.prescale() : 1.0;
  spec.postscale = request.has_postscale() ? request.postscale() : 1.0;
  if (tensor.across_nodes) {
    // A partial result: the final scale follows the nodes' combination.
    spec.postscale = 1.0;
    spec.divisor = 1;
  }
  return spec;
}

exec::ReduceSpec FinalScaleSpec(const negotiation::ReadyTensor& tensor) {
  const v1::TensorRequest& request = tensor.request();
  return exec::ReduceSpec{
      .dtype = request.dtype(),
      .op = v1::REDUCE_OP_SUM,
      .prescale = 1.0,
      .postscale = request.has_postscale() ? request.postscale() : 1.0,
      .divisor = request.op() == v1::REDUCE_OP_AVERAGE ? int64_t{tensor.set_size} : 1};
}

void AddReduction(const negotiation::ReadyTensor& tensor, std::byte* out, WorkList& work,
                  const WorkList::Outputs& copies) {
  const v1::TensorRequest& request = tensor.request();
  AddReductionRange(tensor, out, work, 0, request.length() / ElementSize(request.dtype()), copies);
}

void AddReductionRange(const negotiation::ReadyTensor& tensor, std::byte* out, WorkList& work,
                       uint64_t first, uint64_t count, const WorkList::Outputs& copies) {
  const uint64_t skip = first * ElementSize(tensor.request().dtype());
  WorkList::Outputs also = copies;
  for (std::byte*& copy : also) copy += skip;
  AddReductionOfRange(tensor, out != nullptr ? out + skip : nullptr, work, first, count, also);
}

void AddReductionOfRange(const negotiation::ReadyTensor& tensor, std::byte* out, WorkList& work,
                         uint64_t first, uint64_t count, const WorkList::Outputs& copies) {
  WorkList::Inputs inputs;
  if (tensor.across_nodes) {
    // This node's ranks, then zeros for those that joined (they exist only
    // here: the other nodes' ranks are in their partial results).
    for (const negotiation::Submission& submission : tensor.submissions)
      inputs.push_back(InputOf(submission));
    for (auto r = static_cast<int32_t>(tensor.submissions.size()); r < tensor.local_members; ++r) {
      inputs.push_back(work.zeros());
    }
  } else {
    size_t next = 0;
    for (int32_t rank = 0; rank < tensor.set_size; ++rank) {
      if (next < tensor.submissions.size() && tensor.submissions[next].set_rank == rank) {
        inputs.push_back(InputOf(tensor.submissions[next++]));
      } else {
        inputs.push_back(work.zeros());
      }
    }
  }
  const exec::ReduceSpec spec = ReductionSpec(tensor);
  const uint64_t skip = first * ElementSize(spec.dtype);
  for (const std::byte*& input : inputs) {
    if (input != work.zeros()) input += skip;
  }
  work.AddReduce(spec, inputs, out, count, copies);
}

void AddFinalScaleRange(const negotiation::ReadyTensor& tensor, std::byte* out, WorkList& work,
                        uint64_t first, uint64_t count, const WorkList::Outputs& copies) {
  const exec::ReduceSpec scale = FinalScaleSpec(tensor);
  if (count == 0) return;
  const uint64_t skip = first * ElementSize(scale.dtype);
  std::byte* at = out + skip;
  WorkList::Outputs also = copies;
  for (std::byte*& copy : also) copy += skip;
  if (scale.dtype == v1::DATA_TYPE_BOOL || (scale.postscale == 1.0 && scale.divisor == 1)) {
    if (!also.empty()) work.AddCopy(nullptr, at, count * ElementSize(scale.dtype), also);
    return;
  }
  work.AddReduce(scale, {at}, at, count, also);
}

const CollectiveOp& AllreduceOp() {
  static const Allreduce op;
  return op;
}

}  // namespace collective::daemon::exec::ops
