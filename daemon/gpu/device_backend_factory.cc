#include "daemon/gpu/device_backend_factory.h"

#include "collective/build_config.h"

#if COLLECTIVE_HAVE_CUDA
#include "daemon/gpu/cuda_backend.h"
#endif

namespace collective::daemon::gpu {

std::unique_ptr<DeviceBackend> CreateDeviceBackend() {
#if COLLECTIVE_HAVE_CUDA
  return std::make_unique<CudaBackend>();
#else
  return nullptr;
#endif
}

}  // namespace collective::daemon::gpu
