#include "daemon/gpu/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/gpu/device_reduce.h"
#include "daemon/gpu/reduce_params.h"

namespace collective::daemon::gpu {
namespace {

// Runs a NotifyWhenDone callback on CUDA's host-function thread.
void CUDART_CB RunCallback(void* data) {
  std::unique_ptr<std::function<void()>> done(static_cast<std::function<void()>*>(data));
  (*done)();
}

}  // namespace

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(what, ": ", cudaGetErrorString(error), " (", cudaGetErrorName(error), ")"));
}

CudaBackend::~CudaBackend() {
  for (auto& [id, event] : events_) cudaEventDestroy(event);
  for (auto& [where, stream] : streams_) cudaStreamDestroy(stream);
}

absl::Status CudaBackend::Initialise() {
  if (initialised_.has_value()) return *initialised_;
  initialised_ = [this]() -> absl::Status {
    int count = 0;
    RETURN_IF_ERROR(CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount"));
    if (count == 0) return absl::FailedPreconditionError("this machine has no CUDA device");
    for (int ordinal = 0; ordinal < count; ++ordinal) {
      cudaDeviceProp properties{};
      RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&properties, ordinal),
                                 absl::StrCat("cudaGetDeviceProperties(", ordinal, ")")));
      devices_.push_back({.ordinal = ordinal,
                          .uuid = std::string(properties.uuid.bytes, kUuidBytes),
                          .name = properties.name});
      // Scratch and fusion buffers come from the device's stream-ordered
      // pool; keep what it has allocated instead of handing it back to the
      // driver after every batch.
      cudaMemPool_t pool = nullptr;
      RETURN_IF_ERROR(
          CudaStatus(cudaDeviceGetDefaultMemPool(&pool, ordinal), "cudaDeviceGetDefaultMemPool"));
      uint64_t keep = std::numeric_limits<uint64_t>::max();
      RETURN_IF_ERROR(
          CudaStatus(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                     "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)"));
    }
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    RETURN_IF_ERROR(CudaStatus(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &function,
                                                                12000, cudaEnableDefault, &found),
                               "cudaGetDriverEntryPointByVersion(cuMemGetAddressRange)"));
    if (found != cudaDriverEntryPointSuccess || function == nullptr) {
      return absl::FailedPreconditionError("the CUDA driver has no cuMemGetAddressRange");
    }
    address_range_ = reinterpret_cast<AddressRange>(function);
    log::Nccl().info("CUDA initialised: {} device(s)", devices_.size());
    return absl::OkStatus();
  }();
  return *initialised_;
}

absl::StatusOr<std::vector<DeviceInfo>> CudaBackend::Devices() {
  RETURN_IF_ERROR(Initialise());
  return devices_;
}

absl::StatusOr<cudaStream_t> CudaBackend::Stream(int device) {
  RETURN_IF_ERROR(Initialise());
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")")));
  auto it = streams_.find({lane_, device});
  if (it != streams_.end()) return it->second;
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                             "cudaStreamCreateWithFlags"));
  streams_.emplace(std::make_pair(lane_, device), stream);
  return stream;
}

absl::StatusOr<Mapping> CudaBackend::OpenMemory(int device, absl::string_view ipc_handle) {
  RETURN_IF_ERROR(Stream(device).status());
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, ipc_handle.data(), sizeof(handle));
  void* pointer = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaIpcOpenMemHandle(&pointer, handle, cudaIpcMemLazyEnablePeerAccess),
                             "cudaIpcOpenMemHandle"));
  unsigned long long base = 0;
  size_t bytes = 0;
  if (const int result = address_range_(&base, &bytes, reinterpret_cast<uintptr_t>(pointer));
      result != 0 || base != reinterpret_cast<uintptr_t>(pointer)) {
    cudaIpcCloseMemHandle(pointer);
    return absl::InternalError(absl::StrCat(
        "cuMemGetAddressRange of a freshly opened IPC mapping failed (CUresult ", result, ")"));
  }
  return Mapping{static_cast<std::byte*>(pointer), bytes};
}

absl::Status CudaBackend::CloseMemory(int device, std::byte* base) {
  RETURN_IF_ERROR(Stream(device).status());
  return CudaStatus(cudaIpcCloseMemHandle(base), "cudaIpcCloseMemHandle");
}

absl::StatusOr<EventId> CudaBackend::OpenEvent(int device, absl::string_view ipc_handle) {
  RETURN_IF_ERROR(Stream(device).status());
  cudaIpcEventHandle_t handle;
  std::memcpy(&handle, ipc_handle.data(), sizeof(handle));
  cudaEvent_t event = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaIpcOpenEventHandle(&event, handle), "cudaIpcOpenEventHandle"));
  const EventId id = next_event_++;
  events_.emplace(id, event);
  return id;
}

void CudaBackend::CloseEvent(EventId event) {
  auto it = events_.find(event);
  if (it == events_.end()) return;
  cudaEventDestroy(it->second);
  events_.erase(it);
}

absl::StatusOr<std::string> CudaBackend::NewUniqueId() { return nccl_.NewUniqueId(); }

absl::StatusOr<CommId> CudaBackend::CreateCommunicator(const CommunicatorSpec& spec) {
  RETURN_IF_ERROR(Initialise());
  return nccl_.Create(spec);
}

absl::Status CudaBackend::CommunicatorError(CommId comm) { return nccl_.AsyncError(comm); }

void CudaBackend::AbortCommunicator(CommId comm) { nccl_.Abort(comm); }

void CudaBackend::DestroyCommunicator(CommId comm) { nccl_.Destroy(comm); }

void CudaBackend::AbandonStreams() { DestroyStreams(lane_); }

void CudaBackend::EndLane(uint64_t lane) { DestroyStreams(lane); }

void CudaBackend::DestroyStreams(uint64_t lane) {
  for (auto it = streams_.lower_bound({lane, std::numeric_limits<int>::min()});
       it != streams_.end() && it->first.first == lane;) {
    cudaStreamDestroy(it->second);
    it = streams_.erase(it);
  }
}

absl::StatusOr<std::byte*> CudaBackend::AllocateScratch(int device, uint64_t bytes) {
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  void* buffer = nullptr;
  // A device without data to receive still hands NCCL a buffer.
  RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(&buffer, std::max<uint64_t>(bytes, 1), stream),
                             absl::StrCat("cudaMallocAsync(", bytes, " bytes)")));
  return static_cast<std::byte*>(buffer);
}

absl::Status CudaBackend::FreeScratch(int device, std::byte* buffer) {
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  return CudaStatus(cudaFreeAsync(buffer, stream), "cudaFreeAsync");
}

absl::Status CudaBackend::WaitEvent(int device, EventId event) {
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  auto it = events_.find(event);
  if (it == events_.end()) return absl::InternalError("waiting on an unknown CUDA event");
  return CudaStatus(cudaStreamWaitEvent(stream, it->second, 0), "cudaStreamWaitEvent");
}

absl::Status CudaBackend::RecordEvent(int device, EventId event) {
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  auto it = events_.find(event);
  if (it == events_.end()) return absl::InternalError("recording an unknown CUDA event");
  return CudaStatus(cudaEventRecord(it->second, stream), "cudaEventRecord");
}

absl::Status CudaBackend::Copy(int device, std::span<const DeviceCopy> copies) {
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  for (size_t first = 0; first < copies.size(); first += kernels::kMaxCopiesPerLaunch) {
    kernels::CopyParams params{};
    for (size_t c = first; c < copies.size() && params.count < kernels::kMaxCopiesPerLaunch; ++c) {
      params.sources[params.count] = copies[c].source;
      params.destinations[params.count] = copies[c].destination;
      params.bytes[params.count] = copies[c].bytes;
      ++params.count;
    }
    RETURN_IF_ERROR(CudaStatus(kernels::LaunchCopies(params, stream), "the batched copy kernel"));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Reduce(int device, const exec::ReduceSpec& spec,
                                 std::span<const void* const> inputs, void* out, uint64_t count) {
  ASSIGN_OR_RETURN(const math::ReduceParams params, ReduceParamsOf(spec, inputs, out, count));
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  return CudaStatus(kernels::LaunchReduce(params, stream), "the device reduction kernel");
}

absl::Status CudaBackend::GroupStart() { return NcclStatus(ncclGroupStart(), "ncclGroupStart"); }

absl::Status CudaBackend::GroupEnd() { return NcclStatus(ncclGroupEnd(), "ncclGroupEnd"); }

absl::Status CudaBackend::AllReduce(CommId comm, int device, const void* send, void* recv,
                                    uint64_t count, v1::DataType dtype, v1::ReduceOp op) {
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  return nccl_.AllReduce(comm, device, stream, send, recv, count, dtype, op);
}

absl::Status CudaBackend::Broadcast(CommId comm, int device, const void* send, void* recv,
                                    uint64_t bytes, int root) {
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  return nccl_.Broadcast(comm, device, stream, send, recv, bytes, root);
}

absl::Status CudaBackend::ReduceToRoot(CommId comm, int device, const void* send, void* recv,
                                       uint64_t count, v1::DataType dtype, v1::ReduceOp op,
                                       int root) {
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  return nccl_.Reduce(comm, device, stream, send, recv, count, dtype, op, root);
}

absl::Status CudaBackend::Send(CommId comm, int device, const void* buffer, uint64_t bytes,
                               int peer) {
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  return nccl_.Send(comm, device, stream, buffer, bytes, peer);
}

absl::Status CudaBackend::Recv(CommId comm, int device, void* buffer, uint64_t bytes, int peer) {
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  return nccl_.Recv(comm, device, stream, buffer, bytes, peer);
}

absl::Status CudaBackend::NotifyWhenDone(int device, std::function<void()> done) {
  ASSIGN_OR_RETURN(cudaStream_t stream, Stream(device));
  auto callback = std::make_unique<std::function<void()>>(std::move(done));
  RETURN_IF_ERROR(
      CudaStatus(cudaLaunchHostFunc(stream, &RunCallback, callback.get()), "cudaLaunchHostFunc"));
  callback.release();
  return absl::OkStatus();
}

}  // namespace collective::daemon::gpu
