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

// Checks the dtype code; throws a ValueError-mapped StatusError otherwise.
TensorView ToTensorView(const TensorArg& arg);
std::vector<TensorView> ToTensorViews(const std::vector<TensorArg>& args);

// Output addresses (0: none) as the pointers libcollective writes to.
std::vector<void*> ToPointers(const std::vector<std::uintptr_t>& addresses);
void* ToPointer(std::uintptr_t address);

// Wire codes of the reduce ops (collective::ReduceOp); throws on others.
ReduceOp ToReduceOp(int code);

}  // namespace collective::python
