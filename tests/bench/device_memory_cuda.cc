// collective-bench's CUDA side, with the CUDA runtime (see device_memory.h).
#include <algorithm>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tests/bench/device_memory.h"

namespace collective::bench {
namespace {

absl::Status Cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(cudaStream_t stream) : stream_(stream) {}
  ~CudaMemory() override {
    for (void* buffer : buffers_) cudaFree(buffer);
    cudaStreamDestroy(stream_);
  }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* buffer = nullptr;
    RETURN_IF_ERROR(Cuda(cudaMalloc(&buffer, std::max<size_t>(bytes, 1)), "cudaMalloc"));
    buffers_.push_back(buffer);
    return buffer;
  }
  absl::Status Upload(void* device, const void* host, size_t bytes) override {
    return Cuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_),
                "cudaMemcpyAsync");
  }
  absl::Status Download(void* host, const void* device, size_t bytes) override {
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_),
                         "cudaMemcpyAsync"));
    return Synchronize();
  }
  absl::Status Synchronize() override {
    return Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void* stream() const override { return stream_; }

 private:
  cudaStream_t stream_;
  std::vector<void*> buffers_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceMemory>> DeviceMemory::Open(int local_rank) {
  int devices = 0;
  RETURN_IF_ERROR(Cuda(cudaGetDeviceCount(&devices), "--device cuda: cudaGetDeviceCount"));
  if (devices == 0) return absl::FailedPreconditionError("--device cuda: no CUDA device");
  RETURN_IF_ERROR(Cuda(cudaSetDevice(local_rank % devices), "cudaSetDevice"));
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(
      Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
  return std::make_unique<CudaMemory>(stream);
}

absl::StatusOr<double> MeasureDeviceCopy(uint64_t bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceMemory> memory, DeviceMemory::Open(0));
  ASSIGN_OR_RETURN(void* from, memory->Allocate(bytes));
  ASSIGN_OR_RETURN(void* to, memory->Allocate(bytes));
  const auto stream = static_cast<cudaStream_t>(memory->stream());
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  const absl::Cleanup destroy = [&] {
    if (start != nullptr) cudaEventDestroy(start);
    if (end != nullptr) cudaEventDestroy(end);
  };
  RETURN_IF_ERROR(Cuda(cudaEventCreate(&start), "cudaEventCreate"));
  RETURN_IF_ERROR(Cuda(cudaEventCreate(&end), "cudaEventCreate"));
  float fastest_ms = 0;
  for (int attempt = 0; attempt < 6; ++attempt) {
    RETURN_IF_ERROR(Cuda(cudaEventRecord(start, stream), "cudaEventRecord"));
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream),
                         "cudaMemcpyAsync"));
    RETURN_IF_ERROR(Cuda(cudaEventRecord(end, stream), "cudaEventRecord"));
    RETURN_IF_ERROR(Cuda(cudaEventSynchronize(end), "cudaEventSynchronize"));
    float ms = 0;
    RETURN_IF_ERROR(Cuda(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime"));
    // The first copy warms up.
    if (attempt > 0 && (fastest_ms == 0 || ms < fastest_ms)) fastest_ms = ms;
  }
  return static_cast<double>(bytes) / (static_cast<double>(fastest_ms) / 1e3);
}

}  // namespace collective::bench
