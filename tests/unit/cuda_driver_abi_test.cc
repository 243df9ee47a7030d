// client/cuda_driver.h declares the driver functions libcollective loads at
// run time itself, so that it needs no CUDA headers or libraries to build;
// where the CUDA toolkit is present, this holds those declarations to
// cuda.h: the same symbols (the versioned ones cuda.h maps its names to),
// parameters of the same sizes, and the same constants.
#include <cuda.h>

#include <gtest/gtest.h>

#include "client/cuda_driver.h"

namespace collective::internal::cuda {
namespace {

// Same number of parameters, each (and the result) of the same size.
template <typename Ours, typename Theirs>
struct SameShape : std::false_type {};
template <typename R1, typename... P1, typename R2, typename... P2>
struct SameShape<R1 (*)(P1...), R2 (*)(P2...)>
    : std::bool_constant<sizeof...(P1) == sizeof...(P2) && sizeof(R1) == sizeof(R2) &&
                         ((sizeof(P1) == sizeof(P2)) && ...)> {};

#define COLLECTIVE_SAME_SHAPE(field, function) \
  static_assert(SameShape<decltype(Driver::field), decltype(&function)>::value, #function)

COLLECTIVE_SAME_SHAPE(GetErrorString, cuGetErrorString);
COLLECTIVE_SAME_SHAPE(CtxGetCurrent, cuCtxGetCurrent);
COLLECTIVE_SAME_SHAPE(CtxGetDevice, cuCtxGetDevice);
COLLECTIVE_SAME_SHAPE(DeviceGetUuid, cuDeviceGetUuid_v2);
COLLECTIVE_SAME_SHAPE(MemGetAddressRange, cuMemGetAddressRange);
COLLECTIVE_SAME_SHAPE(PointerGetAttribute, cuPointerGetAttribute);
COLLECTIVE_SAME_SHAPE(IpcGetMemHandle, cuIpcGetMemHandle);
COLLECTIVE_SAME_SHAPE(EventCreate, cuEventCreate);
COLLECTIVE_SAME_SHAPE(EventDestroy, cuEventDestroy);
COLLECTIVE_SAME_SHAPE(IpcGetEventHandle, cuIpcGetEventHandle);
COLLECTIVE_SAME_SHAPE(EventRecord, cuEventRecord);
COLLECTIVE_SAME_SHAPE(StreamWaitEvent, cuStreamWaitEvent);

static_assert(sizeof(IpcMemHandle) == sizeof(CUipcMemHandle));
static_assert(sizeof(IpcEventHandle) == sizeof(CUipcEventHandle));
static_assert(sizeof(Uuid) == sizeof(CUuuid));
static_assert(sizeof(DevicePointer) == sizeof(CUdeviceptr));
static_assert(kAttributeMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(kAttributeBufferId == CU_POINTER_ATTRIBUTE_BUFFER_ID);
static_assert(kAttributeDeviceOrdinal == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
static_assert(kMemoryTypeDevice == CU_MEMORYTYPE_DEVICE);
static_assert(kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(kEventInterprocess == CU_EVENT_INTERPROCESS);

#define COLLECTIVE_NAME(function) COLLECTIVE_NAME_TEXT(function)
#define COLLECTIVE_NAME_TEXT(function) #function

// cuda_driver.cc looks these up by name; cuda.h maps the plain names to
// the versions it means.
TEST(CudaDriverAbiTest, LoadsTheSymbolsCudaHNames) {
  EXPECT_STREQ(COLLECTIVE_NAME(cuMemGetAddressRange), "cuMemGetAddressRange_v2");
  EXPECT_STREQ(COLLECTIVE_NAME(cuEventDestroy), "cuEventDestroy_v2");
  EXPECT_STREQ(COLLECTIVE_NAME(cuEventRecord), "cuEventRecord");
  EXPECT_STREQ(COLLECTIVE_NAME(cuStreamWaitEvent), "cuStreamWaitEvent");
  EXPECT_STREQ(COLLECTIVE_NAME(cuCtxGetCurrent), "cuCtxGetCurrent");
  EXPECT_STREQ(COLLECTIVE_NAME(cuIpcGetMemHandle), "cuIpcGetMemHandle");
}

TEST(CudaDriverAbiTest, ExplainsAMissingDriver) {
  // On a machine without the NVIDIA driver (as in CI) the error says what
  // is missing; with one, the driver loads.
  const auto driver = LoadDriver();
  if (driver.ok()) {
    EXPECT_NE((*driver)->EventRecord, nullptr);
  } else {
    EXPECT_EQ(driver.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(driver.status().message().find("libcuda.so.1"), absl::string_view::npos);
  }
}

}  // namespace
}  // namespace collective::internal::cuda
