// The daemon's CUDA kernels (see device_reduce.h). Memory-bound loops over
// the elements with a grid stride; the arithmetic is device_math.h's.
#include "daemon/gpu/device_reduce.h"

namespace collective::daemon::gpu::kernels {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU; the grid stride covers the rest.
constexpr uint64_t kMaxBlocks = 4096;

template <class Format, int kOp>
__global__ void ReduceKernel(const math::ReduceParams params) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < params.count;
       i += stride) {
    math::ReduceElement<Format, kOp>(params, i);
  }
}

// blockIdx.y picks the copy; 16-byte words where both ends and the length
// allow, bytes otherwise.
__global__ void CopyKernel(const CopyParams params) {
  const int c = static_cast<int>(blockIdx.y);
  const uint64_t bytes = params.bytes[c];
  const auto* source = static_cast<const unsigned char*>(params.sources[c]);
  auto* destination = static_cast<unsigned char*>(params.destinations[c]);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool wide =
      ((reinterpret_cast<uintptr_t>(source) | reinterpret_cast<uintptr_t>(destination) | bytes) &
       15u) == 0;
  if (wide) {
    const auto* from = reinterpret_cast<const uint4*>(source);
    auto* to = reinterpret_cast<uint4*>(destination);
    for (uint64_t i = first; i < bytes / 16; i += stride) to[i] = from[i];
    return;
  }
  for (uint64_t i = first; i < bytes; i += stride) destination[i] = source[i];
}

unsigned Blocks(uint64_t work) {
  const uint64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

}  // namespace

cudaError_t LaunchReduce(const math::ReduceParams& params, cudaStream_t stream) {
  if (params.count == 0) return cudaSuccess;
  const bool known = math::Visit(params.dtype, params.op, [&]<class Format, int kOp>() {
    ReduceKernel<Format, kOp><<<Blocks(params.count), kThreads, 0, stream>>>(params);
  });
  if (!known) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t LaunchCopies(const CopyParams& params, cudaStream_t stream) {
  uint64_t largest = 0;
  for (int c = 0; c < params.count; ++c)
    largest = params.bytes[c] > largest ? params.bytes[c] : largest;
  if (params.count == 0 || largest == 0) return cudaSuccess;
  const dim3 grid(Blocks(largest / 16 + 1), static_cast<unsigned>(params.count));
  CopyKernel<<<grid, kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace collective::daemon::gpu::kernels
