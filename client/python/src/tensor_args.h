// Tensors as the Python layer passes them: (address, dtype code, shape). The
// binding never sees a torch::Tensor, so it links no libtorch and works with
// any PyTorch version; the Python layer keeps the tensors alive.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "collective/client.h"

namespace collective::python {

// (tensor.data_ptr(), dtype code of collective::DataType, list(tensor.shape))
using TensorArg = std::tuple<std::uintptr_t, int, std::vector<int64_t>>;

// Where every tensor of one call lies: the Python layer checks that they
// share one device and passes its code (collective::Device) and, for CUDA,
// the caller's current stream on it (torch.cuda.current_stream().cuda_stream;
// 0 is the default stream).
struct Placement {
  Device device = Device::kCpu;
  void* cuda_stream = nullptr;
};
// Checks the device code; throws a ValueError-mapped StatusError otherwise.
Placement ToPlacement(int device_code, std::uintptr_t cuda_stream);

// Checks the dtype code; throws a ValueError-mapped StatusError otherwise.
TensorView ToTensorView(const TensorArg& arg, const Placement& placement);
std::vector<TensorView> ToTensorViews(const std::vector<TensorArg>& args,
                                      const Placement& placement);

// Output addresses (0: none) as the pointers libcollective writes to.
std::vector<void*> ToPointers(const std::vector<std::uintptr_t>& addresses);
void* ToPointer(std::uintptr_t address);

// Wire codes of the reduce ops (collective::ReduceOp); throws on others.
ReduceOp ToReduceOp(int code);
// An ADASUM_SCOPES code; InvalidArgument (at the call) for any other.
AdasumScope ToAdasumScope(int code);

}  // namespace collective::python
