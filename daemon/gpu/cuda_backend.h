// The DeviceBackend of builds with CUDA and NCCL: the CUDA runtime for
// devices, streams, IPC and events, the daemon's kernels (device_reduce.h),
// and NCCL (nccl_backend.h). CUDA is initialised at the first call, so a
// daemon that never sees a CUDA tensor never touches the GPU (or needs a
// driver). Engine thread only; the NotifyWhenDone callbacks run on CUDA's
// own thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/container/flat_hash_map.h"
#include "daemon/gpu/device_backend.h"
#include "daemon/gpu/nccl_backend.h"

namespace collective::daemon::gpu {

// The status of a CUDA runtime call: OK, or UNAVAILABLE naming `what` and
// CUDA's name and description of the error.
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend() = default;
  ~CudaBackend() override;

  absl::StatusOr<std::vector<DeviceInfo>> Devices() override;
  absl::StatusOr<Mapping> OpenMemory(int device, absl::string_view ipc_handle) override;
  absl::Status CloseMemory(int device, std::byte* base) override;
  absl::StatusOr<EventId> OpenEvent(int device, absl::string_view ipc_handle) override;
  void CloseEvent(EventId event) override;

  absl::StatusOr<std::string> NewUniqueId() override;
  absl::StatusOr<CommId> CreateCommunicator(const CommunicatorSpec& spec) override;
  absl::Status CommunicatorError(CommId comm) override;
  void AbortCommunicator(CommId comm) override;
  void DestroyCommunicator(CommId comm) override;
  void UseLane(uint64_t lane) override { lane_ = lane; }
  void AbandonStreams() override;
  void EndLane(uint64_t lane) override;

  absl::StatusOr<std::byte*> AllocateScratch(int device, uint64_t bytes) override;
  absl::Status FreeScratch(int device, std::byte* buffer) override;
  absl::Status WaitEvent(int device, EventId event) override;
  absl::Status RecordEvent(int device, EventId event) override;
  absl::Status Copy(int device, std::span<const DeviceCopy> copies) override;
  absl::Status Reduce(int device, const exec::ReduceSpec& spec, std::span<const void* const> inputs,
                      void* out, uint64_t count) override;

  absl::Status GroupStart() override;
  absl::Status GroupEnd() override;
  absl::Status AllReduce(CommId comm, int device, const void* send, void* recv, uint64_t count,
                         v1::DataType dtype, v1::ReduceOp op) override;
  absl::Status Broadcast(CommId comm, int device, const void* send, void* recv, uint64_t bytes,
                         int root) override;
  absl::Status ReduceToRoot(CommId comm, int device, const void* send, void* recv, uint64_t count,
                            v1::DataType dtype, v1::ReduceOp op, int root) override;
  absl::Status Send(CommId comm, int device, const void* buffer, uint64_t bytes, int peer) override;
  absl::Status Recv(CommId comm, int device, void* buffer, uint64_t bytes, int peer) override;

  absl::Status NotifyWhenDone(int device, std::function<void()> done) override;

 private:
  // The driver's cuMemGetAddressRange, found through the runtime so that the
  // daemon does not link libcuda (which only GPU machines have).
  using AddressRange = int (*)(unsigned long long* base, size_t* size, unsigned long long ptr);

  absl::Status Initialise();
  // Makes `device` current and returns the current lane's stream on it
  // (created on first use).
  absl::StatusOr<cudaStream_t> Stream(int device);
  // Destroys `lane`'s streams: cudaStreamDestroy returns at once, and a
  // stream goes when its work is done (or with the process, if never).
  void DestroyStreams(uint64_t lane);

  std::optional<absl::Status> initialised_;
  std::vector<DeviceInfo> devices_;
  AddressRange address_range_ = nullptr;
  uint64_t lane_ = 0;
  // By lane and device.
  std::map<std::pair<uint64_t, int>, cudaStream_t> streams_;
  absl::flat_hash_map<EventId, cudaEvent_t> events_;
  EventId next_event_ = 1;
  NcclBackend nccl_;
};

}  // namespace collective::daemon::gpu
