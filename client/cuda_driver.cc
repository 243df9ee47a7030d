#include "client/cuda_driver.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace collective::internal::cuda {
namespace {

template <typename Function>
bool Find(void* library, const char* name, Function*& function) {
  function = reinterpret_cast<Function*>(::dlsym(library, name));
  return function != nullptr;
}

absl::StatusOr<Driver> Load() {
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* error = ::dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA tensors need the NVIDIA driver, and libcuda.so.1 cannot be loaded (",
                     error != nullptr ? error : "unknown error", ")"));
  }
  Driver driver{};
  const char* missing = nullptr;
  const auto need = [&](const char* name, auto*& function) {
    if (missing == nullptr && !Find(library, name, function)) missing = name;
  };
  need("cuGetErrorString", driver.GetErrorString);
  need("cuCtxGetCurrent", driver.CtxGetCurrent);
  need("cuCtxGetDevice", driver.CtxGetDevice);
  need("cuDeviceGetUuid_v2", driver.DeviceGetUuid);
  need("cuMemGetAddressRange_v2", driver.MemGetAddressRange);
  need("cuPointerGetAttribute", driver.PointerGetAttribute);
  need("cuIpcGetMemHandle", driver.IpcGetMemHandle);
  need("cuEventCreate", driver.EventCreate);
  need("cuEventDestroy_v2", driver.EventDestroy);
  need("cuIpcGetEventHandle", driver.IpcGetEventHandle);
  need("cuEventRecord", driver.EventRecord);
  need("cuStreamWaitEvent", driver.StreamWaitEvent);
  if (missing != nullptr) {
    ::dlclose(library);
    return absl::FailedPreconditionError(
        absl::StrCat("the NVIDIA driver's libcuda.so.1 has no ", missing, " (too old a driver?)"));
  }
  // Kept loaded for the life of the process, as the CUDA runtime does.
  return driver;
}

}  // namespace

absl::StatusOr<const Driver*> LoadDriver() {
  static const absl::StatusOr<Driver>* const driver = new absl::StatusOr<Driver>(Load());
  if (!driver->ok()) return driver->status();
  return &driver->value();
}

absl::Status Check(const Driver& driver, Result result, absl::string_view what) {
  if (result == 0) return absl::OkStatus();
  const char* text = nullptr;
  if (driver.GetErrorString == nullptr || driver.GetErrorString(result, &text) != 0 ||
      text == nullptr) {
    text = "unknown error";
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", text, " (CUresult ", result, ")"));
}

}  // namespace collective::internal::cuda
