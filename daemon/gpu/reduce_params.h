// The device reduction's launch parameters from a host-side ReduceSpec, and
// the same reduction run on the CPU with the kernel's own element function
// (device_math.h): what the CUDA backend launches, and what the fake device
// backend and the tests compute. Host code only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "daemon/exec/reduce_kernels.h"
#include "daemon/gpu/device_math.h"

namespace collective::daemon::gpu {

// device_math.h spells the wire's values out for the kernel; they must stay
// the wire's.
constexpr bool SameValue(int kernel, int wire) { return kernel == wire; }
static_assert(SameValue(math::kUInt8, v1::DATA_TYPE_UINT8) &&
              SameValue(math::kInt8, v1::DATA_TYPE_INT8) &&
              SameValue(math::kUInt16, v1::DATA_TYPE_UINT16) &&
              SameValue(math::kInt16, v1::DATA_TYPE_INT16) &&
              SameValue(math::kInt32, v1::DATA_TYPE_INT32) &&
              SameValue(math::kInt64, v1::DATA_TYPE_INT64) &&
              SameValue(math::kFloat16, v1::DATA_TYPE_FLOAT16) &&
              SameValue(math::kBFloat16, v1::DATA_TYPE_BFLOAT16) &&
              SameValue(math::kFloat32, v1::DATA_TYPE_FLOAT32) &&
              SameValue(math::kFloat64, v1::DATA_TYPE_FLOAT64) &&
              SameValue(math::kBool, v1::DATA_TYPE_BOOL));
static_assert(SameValue(math::kSum, v1::REDUCE_OP_SUM) &&
              SameValue(math::kMin, v1::REDUCE_OP_MIN) &&
              SameValue(math::kMax, v1::REDUCE_OP_MAX) &&
              SameValue(math::kProduct, v1::REDUCE_OP_PRODUCT));

// out = reduce(inputs) as DeviceBackend::Reduce defines it; at most
// math::kMaxReduceInputs inputs (clients sharing one device).
inline absl::StatusOr<math::ReduceParams> ReduceParamsOf(const exec::ReduceSpec& spec,
                                                         std::span<const void* const> inputs,
                                                         void* out, uint64_t count) {
  if (inputs.size() > static_cast<size_t>(math::kMaxReduceInputs)) {
    return absl::UnimplementedError(absl::StrCat(inputs.size(),
                                                 " clients share one CUDA device; the device "
                                                 "reduction takes at most ",
                                                 math::kMaxReduceInputs));
  }
  math::ReduceParams params{};
  std::copy(inputs.begin(), inputs.end(), params.inputs);
  params.input_count = static_cast<int>(inputs.size());
  params.out = out;
  params.count = count;
  params.dtype = spec.dtype;
  params.op = spec.op;
  params.prescale = spec.prescale;
  params.postscale = spec.postscale;
  params.divisor = spec.divisor;
  return params;
}

// The reduction on the CPU, element by element; false for a dtype and op
// without a kernel.
inline bool ReduceOnHost(const math::ReduceParams& params) {
  return math::Visit(params.dtype, params.op, [&]<class Format, int kOp>() {
    for (uint64_t i = 0; i < params.count; ++i) math::ReduceElement<Format, kOp>(params, i);
  });
}

}  // namespace collective::daemon::gpu
