// The data collectives on CUDA devices: how one fused batch becomes waits,
// device-side reductions and copies, and NCCL calls on this node's devices
// (one communicator rank per device; several clients may share a device).
//
// Every collective reads a client's input and writes its output only on
// that client's device, on the daemon's stream of that device, so the
// client's done event, recorded there afterwards, covers all of it.
//
//  - allreduce: the clients sharing a device are reduced into one buffer
//    first (a device kernel, fixed order, float16 and bfloat16 accumulated
//    in float32), then NCCL reduces across devices, then the result is
//    scaled and copied to every client's output. A fused batch is packed
//    into a device fusion buffer (a batched copy, or the local reduction
//    writing straight into its slots), reduced with one NCCL call, and
//    copied out with one batched copy per device.
//  - reducescatter: as allreduce up to NCCL, then one ncclReduce per rank's
//    block, to the device of the rank that keeps it.
//  - broadcast: one ncclBroadcast from the root's device; allgather: one
//    per rank's block; the devices' other clients get copies.
//  - alltoall: NCCL send/recv between devices, copies within one.
//  - reduce: as reducescatter, with one block (the whole tensor) for the
//    root.
//  - gather, scatter and point-to-point messages: each block moves once,
//    from the rank that holds it to the rank that receives it (a copy on
//    one device, NCCL send/recv between two), as alltoall's blocks do.
//
// Devices of the communicator without a member of the tensor's process set
// still take part (with the op's identity, or a scratch buffer to receive).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/gpu/device_backend.h"
#include "daemon/negotiation/coordinator.h"

namespace collective::daemon::gpu {

// This node's part of a communicator: its devices (ordinals; the device at
// index i is communicator rank first_rank + i).
struct Communicator {
  CommId id = 0;
  std::vector<int> devices;
  int first_rank = 0;
  int ranks = 0;
  // Spans this node only (then ncclAvg can stand for the average).
  bool node_local = true;

  // The index of `ordinal` among devices, or -1.
  int IndexOf(int ordinal) const;
};

// One submission of a tensor, resolved to this daemon's device addresses.
struct DeviceMember {
  int device = 0;  // index into Communicator::devices
  const std::byte* input = nullptr;
  std::byte* output = nullptr;
};

struct DeviceTensor {
  const negotiation::ReadyTensor* tensor = nullptr;
  std::vector<DeviceMember> members;  // as tensor->submissions
};

// Bytes of each rank's input.
inline uint64_t Length(const DeviceTensor& tensor) { return tensor.tensor->request().length(); }

// The work of one batch: the scratch buffers it allocated (freed, stream
// ordered, once everything is queued) and the communicator it runs on.
class DeviceIssue {
 public:
  DeviceIssue(DeviceBackend& backend, const Communicator& comm) : backend_(backend), comm_(comm) {}

  DeviceBackend& backend() const { return backend_; }
  const Communicator& comm() const { return comm_; }
  int ordinal(int index) const { return comm_.devices[static_cast<size_t>(index)]; }
  int rank(int index) const { return comm_.first_rank + index; }
  int devices() const { return static_cast<int>(comm_.devices.size()); }

  absl::StatusOr<std::byte*> Scratch(int index, uint64_t bytes);
  // Copies on device `index` (skipped when empty).
  absl::Status Copy(int index, const std::vector<DeviceCopy>& copies) const;
  // Runs `calls` between GroupStart and GroupEnd; the first error wins, and
  // the group is closed either way.
  template <class Calls>
  absl::Status Grouped(Calls calls) const {
    if (absl::Status started = backend_.GroupStart(); !started.ok()) return started;
    absl::Status status = calls();
    absl::Status ended = backend_.GroupEnd();
    return status.ok() ? ended : status;
  }
  // Frees every scratch buffer (after the work that uses it, in stream order).
  absl::Status FreeScratch();

 private:
  DeviceBackend& backend_;
  const Communicator& comm_;
  std::vector<std::pair<int, std::byte*>> scratch_;
};

absl::Status IssueAllreduce(DeviceIssue& issue, std::span<const DeviceTensor> tensors);
absl::Status IssueReducescatter(DeviceIssue& issue, std::span<const DeviceTensor> tensors);
absl::Status IssueBroadcast(DeviceIssue& issue, std::span<const DeviceTensor> tensors);
absl::Status IssueAllgather(DeviceIssue& issue, std::span<const DeviceTensor> tensors);
absl::Status IssueAlltoall(DeviceIssue& issue, std::span<const DeviceTensor> tensors);
absl::Status IssueReduce(DeviceIssue& issue, std::span<const DeviceTensor> tensors);
absl::Status IssueGather(DeviceIssue& issue, std::span<const DeviceTensor> tensors);
absl::Status IssueScatter(DeviceIssue& issue, std::span<const DeviceTensor> tensors);
// Matched sends and receives (exec/ops/message.cc: members[0] sends,
// members[1] receives).
absl::Status IssueMessages(DeviceIssue& issue, std::span<const DeviceTensor> tensors);

}  // namespace collective::daemon::gpu
