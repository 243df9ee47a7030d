// The few CUDA driver functions the client library needs for CUDA tensors,
// found at run time in the NVIDIA driver's libcuda.so.1: libcollective links
// no CUDA library, so it loads on machines without a GPU, and a trainer built
// against one CUDA release keeps working with the next (the driver's ABI is
// stable). The declarations below are the driver API's (cuda.h); a test built
// with the CUDA toolkit checks them against it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace collective::internal::cuda {

using Result = int;                        // CUresult; 0 is CUDA_SUCCESS
using Device = int;                        // CUdevice
using DevicePointer = unsigned long long;  // CUdeviceptr
struct ContextState;                       // CUctx_st
using Context = ContextState*;
struct EventState;  // CUevent_st
using Event = EventState*;
struct StreamState;  // CUstream_st
using Stream = StreamState*;
struct IpcMemHandle {
  char reserved[64];
};
struct IpcEventHandle {
  char reserved[64];
};
struct Uuid {
  char bytes[16];
};

// CUpointer_attribute, CUmemorytype and CUevent_flags values.
inline constexpr int kAttributeMemoryType = 2;
inline constexpr int kAttributeBufferId = 7;
inline constexpr int kAttributeDeviceOrdinal = 9;
inline constexpr unsigned kMemoryTypeDevice = 2;
inline constexpr unsigned kEventDisableTiming = 2;
inline constexpr unsigned kEventInterprocess = 4;

struct Driver {
  Result (*GetErrorString)(Result error, const char** text);
  Result (*CtxGetCurrent)(Context* context);
  Result (*CtxGetDevice)(Device* device);
  Result (*DeviceGetUuid)(Uuid* uuid, Device device);
  Result (*MemGetAddressRange)(DevicePointer* base, size_t* size, DevicePointer pointer);
  Result (*PointerGetAttribute)(void* data, int attribute, DevicePointer pointer);
  Result (*IpcGetMemHandle)(IpcMemHandle* handle, DevicePointer pointer);
  Result (*EventCreate)(Event* event, unsigned flags);
  Result (*EventDestroy)(Event event);
  Result (*IpcGetEventHandle)(IpcEventHandle* handle, Event event);
  Result (*EventRecord)(Event event, Stream stream);
  Result (*StreamWaitEvent)(Stream stream, Event event, unsigned flags);
};

// The driver, loaded once per process; FAILED_PRECONDITION naming what is
// missing where there is no NVIDIA driver.
absl::StatusOr<const Driver*> LoadDriver();

// OK, or UNAVAILABLE naming `what` and the driver's text for `result`.
absl::Status Check(const Driver& driver, Result result, absl::string_view what);

}  // namespace collective::internal::cuda
