// Allreduce, reducescatter and reduce on CUDA devices (see device_ops.h).
#include <algorithm>

#include "common/dtype.h"
#include "common/status_macros.h"
#include "daemon/exec/ops/collective_op.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/gpu/device_ops.h"
#include "shm/segment_layout.h"

namespace collective::daemon::gpu {
namespace {

// Slots of the fusion buffer start on this boundary: NCCL reduces the
// whole buffer as one array, and every element size divides it.
constexpr uint64_t kSlotAlignment = 256;

// How a reduction runs: the local step (op and prescale), NCCL's op, and
// the final scale (postscale, and the average's division) if NCCL does not
// do it.
struct Reduction {
  exec::ReduceSpec before;
  exec::ReduceSpec after;
  bool scale_after = false;
  v1::ReduceOp nccl_op = v1::REDUCE_OP_SUM;
  // A single input can go to NCCL as it is (bool is normalised to 0 and 1
  // by the local step).
  bool plain_input = true;
  size_t element = 1;
};

// The members of `tensor` on each device, and the zeros of joined ranks
// (which Horovod's join makes contribute zeros; all go to device 0: where
// does not matter to the result).
struct Placement {
  std::vector<std::vector<const DeviceMember*>> members;  // by device index
  std::vector<int> zeros;                                 // by device index
};

Placement Place(const DeviceIssue& issue, const DeviceTensor& tensor) {
  Placement placement;
  placement.members.resize(static_cast<size_t>(issue.devices()));
  placement.zeros.assign(static_cast<size_t>(issue.devices()), 0);
  for (const DeviceMember& member : tensor.members) {
    placement.members[static_cast<size_t>(member.device)].push_back(&member);
  }
  const negotiation::ReadyTensor& ready = *tensor.tensor;
  if (!ready.across_nodes) {
    placement.zeros[0] = ready.set_size - static_cast<int>(ready.submissions.size());
  }
  return placement;
}

Reduction ReductionOf(const DeviceIssue& issue, const DeviceTensor& head,
                      const Placement& placement) {
  const negotiation::ReadyTensor& tensor = *head.tensor;
  const v1::TensorRequest& request = tensor.request();
  const v1::DataType dtype = request.dtype();
  const double prescale = request.has_prescale() ? request.prescale() : 1.0;
  const double postscale = request.has_postscale() ? request.postscale() : 1.0;
  const bool average = request.op() == v1::REDUCE_OP_AVERAGE;
  const v1::ReduceOp op = average ? v1::REDUCE_OP_SUM : request.op();
  Reduction reduction;
  reduction.element = ElementSize(dtype);
  reduction.nccl_op = op;
  reduction.before = {.dtype = dtype, .op = op, .prescale = prescale};
  reduction.after = exec::ops::FinalScaleSpec(tensor);
  reduction.scale_after = dtype != v1::DATA_TYPE_BOOL && (postscale != 1.0 || average);
  reduction.plain_input = dtype != v1::DATA_TYPE_BOOL && prescale == 1.0;
  // One client per device of a node-local communicator: NCCL's own average
  // divides by the set's size, and no scaling pass is needed.
  const bool one_each = std::all_of(placement.members.begin(), placement.members.end(),
                                    [](const auto& members) { return members.size() == 1; }) &&
                        std::all_of(placement.zeros.begin(), placement.zeros.end(),
                                    [](int zeros) { return zeros == 0; });
  if (average && postscale == 1.0 && IsFloatingPoint(dtype) && issue.comm().node_local &&
      one_each) {
    reduction.nccl_op = v1::REDUCE_OP_AVERAGE;
    reduction.scale_after = false;
  }
  return reduction;
}

// The local step's inputs on one device: its members' inputs in set-rank
// order, then zeros.
std::vector<const void*> LocalInputs(const Placement& placement, int device) {
  std::vector<const void*> inputs;
  for (const DeviceMember* member : placement.members[static_cast<size_t>(device)]) {
    inputs.push_back(member->input);
  }
  inputs.insert(inputs.end(), static_cast<size_t>(placement.zeros[static_cast<size_t>(device)]),
                nullptr);
  return inputs;
}

// Whether the device's single member's input can go to NCCL as it is.
bool Direct(const Reduction& reduction, const Placement& placement, int device) {
  return reduction.plain_input && placement.members[static_cast<size_t>(device)].size() == 1 &&
         placement.zeros[static_cast<size_t>(device)] == 0;
}

// NCCL's allreduce of `count` elements on every device (device d sends
// send[d] and receives into result[d]), the final scale where NCCL did not
// apply it, then each device's `copies` of its result.
absl::Status ReduceAcrossDevices(DeviceIssue& issue, const Reduction& reduction,
                                 const std::vector<const void*>& send,
                                 const std::vector<std::byte*>& result, uint64_t count,
                                 const std::vector<std::vector<DeviceCopy>>& copies) {
  DeviceBackend& backend = issue.backend();
  const auto reduce = [&]() -> absl::Status {
    for (int d = 0; d < issue.devices(); ++d) {
      RETURN_IF_ERROR(backend.AllReduce(issue.comm().id, issue.ordinal(d), send[d], result[d],
                                        count, reduction.before.dtype, reduction.nccl_op));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(issue.Grouped(reduce));
  for (int d = 0; d < issue.devices(); ++d) {
    if (reduction.scale_after) {
      const void* self[] = {result[d]};
      RETURN_IF_ERROR(backend.Reduce(issue.ordinal(d), reduction.after, self, result[d], count));
    }
    RETURN_IF_ERROR(issue.Copy(d, copies[d]));
  }
  return absl::OkStatus();
}

// A fused batch: every tensor packed into a fusion buffer per device,
// reduced by one NCCL call over the whole buffer.
absl::Status AllreduceFused(DeviceIssue& issue, std::span<const DeviceTensor> tensors) {
  std::vector<Placement> placements;
  std::vector<uint64_t> slots;
  uint64_t total = 0;
  for (const DeviceTensor& tensor : tensors) {
    placements.push_back(Place(issue, tensor));
    slots.push_back(total);
    total += shm::RoundUp(Length(tensor), kSlotAlignment);
  }
  const Reduction reduction = ReductionOf(issue, tensors.front(), placements.front());
  DeviceBackend& backend = issue.backend();
  std::vector<std::byte*> fusion;
  for (int d = 0; d < issue.devices(); ++d) {
    ASSIGN_OR_RETURN(std::byte * buffer, issue.Scratch(d, total));
    fusion.push_back(buffer);
    std::vector<DeviceCopy> packing;
    for (size_t t = 0; t < tensors.size(); ++t) {
      std::byte* slot = buffer + slots[t];
      if (Direct(reduction, placements[t], d)) {
        packing.push_back({placements[t].members[static_cast<size_t>(d)].front()->input, slot,
                           Length(tensors[t])});
        continue;
      }
      const std::vector<const void*> inputs = LocalInputs(placements[t], d);
      RETURN_IF_ERROR(backend.Reduce(issue.ordinal(d), reduction.before, inputs, slot,
                                     Length(tensors[t]) / reduction.element));
    }
    RETURN_IF_ERROR(issue.Copy(d, packing));
  }
  std::vector<std::vector<DeviceCopy>> copies(static_cast<size_t>(issue.devices()));
  for (int d = 0; d < issue.devices(); ++d) {
    for (size_t t = 0; t < tensors.size(); ++t) {
      for (const DeviceMember* member : placements[t].members[static_cast<size_t>(d)]) {
        copies[d].push_back({fusion[d] + slots[t], member->output, Length(tensors[t])});
      }
    }
  }
  const std::vector<const void*> send(fusion.begin(), fusion.end());
  return ReduceAcrossDevices(issue, reduction, send, fusion, total / reduction.element, copies);
}

// One tensor: NCCL reads a lone client's input and writes its output
// directly; where clients share a device, the first one's output holds the
// local reduction and NCCL works in place on it.
absl::Status AllreduceOne(DeviceIssue& issue, const DeviceTensor& tensor) {
  const Placement placement = Place(issue, tensor);
  const Reduction reduction = ReductionOf(issue, tensor, placement);
  const uint64_t count = Length(tensor) / reduction.element;
  if (count == 0) return absl::OkStatus();
  DeviceBackend& backend = issue.backend();
  std::vector<const void*> send(static_cast<size_t>(issue.devices()));
  std::vector<std::byte*> result(static_cast<size_t>(issue.devices()));
  for (int d = 0; d < issue.devices(); ++d) {
    const auto& members = placement.members[static_cast<size_t>(d)];
    if (Direct(reduction, placement, d)) {
      send[d] = members.front()->input;
      result[d] = members.front()->output;
      continue;
    }
    if (members.empty()) {
      ASSIGN_OR_RETURN(result[d], issue.Scratch(d, Length(tensor)));
    } else {
      result[d] = members.front()->output;
    }
    const std::vector<const void*> inputs = LocalInputs(placement, d);
    RETURN_IF_ERROR(backend.Reduce(issue.ordinal(d), reduction.before, inputs, result[d], count));
    send[d] = result[d];
  }
  std::vector<std::vector<DeviceCopy>> copies(static_cast<size_t>(issue.devices()));
  for (int d = 0; d < issue.devices(); ++d) {
    const auto& members = placement.members[static_cast<size_t>(d)];
    for (size_t m = 1; m < members.size(); ++m) {
      copies[d].push_back({result[d], members[m]->output, Length(tensor)});
    }
  }
  return ReduceAcrossDevices(issue, reduction, send, result, count, copies);
}

// Reducescatter and reduce: every device's contribution reduced by NCCL
// into the blocks the op's results name (each rank's block of a
// reducescatter, the whole tensor for a reduce's root), each on the device
// of the rank that keeps it.
absl::Status ReduceToOwners(DeviceIssue& issue, std::span<const DeviceTensor> tensors) {
  DeviceBackend& backend = issue.backend();
  // Each device's contribution to each tensor: a lone client's input, or
  // the local reduction of the clients sharing the device.
  std::vector<std::vector<const std::byte*>> contributions;
  std::vector<Reduction> reductions;
  for (const DeviceTensor& tensor : tensors) {
    const Placement placement = Place(issue, tensor);
    reductions.push_back(ReductionOf(issue, tensor, placement));
    const Reduction& reduction = reductions.back();
    // The average divides by the set's ranks, not the devices: NCCL's own
    // cannot stand in.
    if (reduction.nccl_op == v1::REDUCE_OP_AVERAGE) {
      reductions.back().nccl_op = v1::REDUCE_OP_SUM;
      reductions.back().scale_after = true;
    }
    std::vector<const std::byte*>& by_device = contributions.emplace_back();
    for (int d = 0; d < issue.devices(); ++d) {
      if (Direct(reduction, placement, d)) {
        by_device.push_back(placement.members[static_cast<size_t>(d)].front()->input);
        continue;
      }
      ASSIGN_OR_RETURN(std::byte * buffer, issue.Scratch(d, Length(tensor)));
      const std::vector<const void*> inputs = LocalInputs(placement, d);
      RETURN_IF_ERROR(backend.Reduce(issue.ordinal(d), reduction.before, inputs, buffer,
                                     Length(tensor) / reduction.element));
      by_device.push_back(buffer);
    }
  }
  // Rank r's block goes to r's device, whose output receives it.
  const auto for_each_block = [&](size_t t, auto&& each) -> absl::Status {
    const DeviceTensor& tensor = tensors[t];
    const exec::ops::CollectiveOp& op = *exec::ops::OpFor(tensor.tensor->request());
    for (size_t i = 0; i < tensor.members.size(); ++i) {
      const exec::ops::RankResult block = op.ResultOf(*tensor.tensor, i);
      if (block.bytes == 0) continue;
      RETURN_IF_ERROR(each(tensor.members[i], block));
    }
    return absl::OkStatus();
  };
  const auto reduce_to = [&](size_t t, const DeviceMember& member,
                             const exec::ops::RankResult& block) -> absl::Status {
    const Reduction& reduction = reductions[t];
    for (int d = 0; d < issue.devices(); ++d) {
      RETURN_IF_ERROR(backend.ReduceToRoot(
          issue.comm().id, issue.ordinal(d), contributions[t][d] + block.offset,
          d == member.device ? member.output : nullptr, block.bytes / reduction.element,
          reduction.before.dtype, reduction.nccl_op, issue.rank(member.device)));
    }
    return absl::OkStatus();
  };
  const auto reduce = [&]() -> absl::Status {
    for (size_t t = 0; t < tensors.size(); ++t) {
      RETURN_IF_ERROR(
          for_each_block(t, [&](const DeviceMember& member, const exec::ops::RankResult& block) {
            return reduce_to(t, member, block);
          }));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(issue.Grouped(reduce));
  for (size_t t = 0; t < tensors.size(); ++t) {
    const Reduction& reduction = reductions[t];
    if (!reduction.scale_after) continue;
    const auto scale = [&](const DeviceMember& member, const exec::ops::RankResult& block) {
      const void* self[] = {member.output};
      return backend.Reduce(issue.ordinal(member.device), reduction.after, self, member.output,
                            block.bytes / reduction.element);
    };
    RETURN_IF_ERROR(for_each_block(t, scale));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status IssueAllreduce(DeviceIssue& issue, std::span<const DeviceTensor> tensors) {
  if (tensors.size() == 1) return AllreduceOne(issue, tensors.front());
  return AllreduceFused(issue, tensors);
}

absl::Status IssueReducescatter(DeviceIssue& issue, std::span<const DeviceTensor> tensors) {
  return ReduceToOwners(issue, tensors);
}

absl::Status IssueReduce(DeviceIssue& issue, std::span<const DeviceTensor> tensors) {
  return ReduceToOwners(issue, tensors);
}

}  // namespace collective::daemon::gpu
