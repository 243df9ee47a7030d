// The device backend of this build: CUDA and NCCL where CMake found them,
// none otherwise (the daemon then refuses CUDA tensors with a clear error).
#pragma once

#include <memory>

#include "daemon/gpu/device_backend.h"

namespace collective::daemon::gpu {

// Null in a build without CUDA. Touches no device until first used.
std::unique_ptr<DeviceBackend> CreateDeviceBackend();

}  // namespace collective::daemon::gpu
