#include "tensor_args.h"

#include "absl/strings/str_cat.h"
#include "errors.h"

namespace collective::python {

Placement ToPlacement(int device_code, std::uintptr_t cuda_stream) {
  const auto device = static_cast<Device>(device_code);
  if (device != Device::kCpu && device != Device::kCuda) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat("unknown device code ", device_code)),
                      ErrorPhase::kCall);
  }
  return Placement{.device = device,
                   .cuda_stream = device == Device::kCuda ? ToPointer(cuda_stream) : nullptr};
}

TensorView ToTensorView(const TensorArg& arg, const Placement& placement) {
  const auto& [address, dtype_code, shape] = arg;
  const auto dtype = static_cast<DataType>(dtype_code);
  if (DataTypeSize(dtype) == 0) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat("unknown dtype code ", dtype_code)),
                      ErrorPhase::kCall);
  }
  return TensorView{.data = ToPointer(address),
                    .dtype = dtype,
                    .shape = shape,
                    .device = placement.device,
                    .cuda_stream = placement.cuda_stream};
}

std::vector<TensorView> ToTensorViews(const std::vector<TensorArg>& args,
                                      const Placement& placement) {
  std::vector<TensorView> views;
  views.reserve(args.size());
  for (const TensorArg& arg : args) views.push_back(ToTensorView(arg, placement));
  return views;
}

void* ToPointer(std::uintptr_t address) {
  // The integer comes from tensor.data_ptr(): the round trip through an
  // integer is how the binding stays free of libtorch.
  return reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr)
}

std::vector<void*> ToPointers(const std::vector<std::uintptr_t>& addresses) {
  std::vector<void*> pointers;
  pointers.reserve(addresses.size());
  for (std::uintptr_t address : addresses) pointers.push_back(ToPointer(address));
  return pointers;
}

ReduceOp ToReduceOp(int code) {
  if (code < static_cast<int>(ReduceOp::kSum) || code > static_cast<int>(ReduceOp::kAdasum)) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat("unknown reduce op code ", code)),
                      ErrorPhase::kCall);
  }
  return static_cast<ReduceOp>(code);
}

AdasumScope ToAdasumScope(int code) {
  if (code != static_cast<int>(AdasumScope::kRanks) &&
      code != static_cast<int>(AdasumScope::kNodes)) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat("unknown Adasum scope code ", code)),
                      ErrorPhase::kCall);
  }
  return static_cast<AdasumScope>(code);
}

}  // namespace collective::python
