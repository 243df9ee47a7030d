// collective-bench built without CUDA: --device cuda explains itself.
#include "tests/bench/device_memory.h"

namespace collective::bench {
namespace {

absl::Status NoCuda() {
  return absl::UnimplementedError(
      "--device cuda: this collective-bench was built without CUDA (CMake found no CUDA "
      "toolkit and NCCL, or COLLECTIVE_GPU=OFF)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceMemory>> DeviceMemory::Open(int) { return NoCuda(); }

absl::StatusOr<double> MeasureDeviceCopy(uint64_t) { return NoCuda(); }

}  // namespace collective::bench
