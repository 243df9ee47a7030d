#include "daemon/exec/fusion.h"

#include "daemon/exec/ops/collective_op.h"

namespace collective::daemon::exec {
namespace {

double ScaleOf(bool present, double value) { return present ? value : 1.0; }

bool Compatible(const v1::TensorRequest& a, const v1::TensorRequest& b) {
  return a.collective() == b.collective() && a.memory() == b.memory() && a.dtype() == b.dtype() &&
         a.op() == b.op() && a.adasum_scope() == b.adasum_scope() &&
         a.process_set_id() == b.process_set_id() && a.root_rank() == b.root_rank() &&
         ScaleOf(a.has_prescale(), a.prescale()) == ScaleOf(b.has_prescale(), b.prescale()) &&
         ScaleOf(a.has_postscale(), a.postscale()) == ScaleOf(b.has_postscale(), b.postscale());
}

}  // namespace

uint64_t SlotBytes(const negotiation::ReadyTensor& tensor) {
  return ops::OpFor(tensor.request())->SlotBytes(tensor);
}

std::vector<FusedBatch> PlanFusion(std::vector<negotiation::ReadyTensor> tensors,
                                   uint64_t threshold) {
  std::vector<FusedBatch> batches;
  std::vector<bool> taken(tensors.size(), false);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    FusedBatch batch;
    batch.bytes = SlotBytes(tensors[i]);
    const v1::TensorRequest& head = tensors[i].request();
    std::vector<size_t> members = {i};
    for (size_t j = i + 1; j < tensors.size() && batch.bytes < threshold; ++j) {
      if (taken[j] || !Compatible(head, tensors[j].request())) continue;
      const uint64_t bytes = SlotBytes(tensors[j]);
      if (batch.bytes + bytes > threshold) continue;
      taken[j] = true;
      batch.bytes += bytes;
      members.push_back(j);
    }
    batch.tensors.reserve(members.size());
    for (size_t index : members) batch.tensors.push_back(std::move(tensors[index]));
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace collective::daemon::exec
