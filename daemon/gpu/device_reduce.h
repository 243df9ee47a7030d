// The daemon's two CUDA kernels, as the CUDA backend launches them: the
// element-wise reduction of the clients sharing a device (and the scaling
// passes; see device_math.h for its arithmetic), and a batched copy that
// moves many tensors in one launch (fusion buffer in and out). Built only
// with CUDA.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "daemon/gpu/device_math.h"

namespace collective::daemon::gpu::kernels {

// Copies per launch of the batched copy (the parameters travel by value).
inline constexpr int kMaxCopiesPerLaunch = 32;

struct CopyParams {
  const void* sources[kMaxCopiesPerLaunch];
  void* destinations[kMaxCopiesPerLaunch];
  uint64_t bytes[kMaxCopiesPerLaunch];
  int count;
};

// cudaErrorInvalidValue for a dtype and op without a kernel.
cudaError_t LaunchReduce(const math::ReduceParams& params, cudaStream_t stream);
cudaError_t LaunchCopies(const CopyParams& params, cudaStream_t stream);

}  // namespace collective::daemon::gpu::kernels
