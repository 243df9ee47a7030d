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
#include "daemon/gpu/device_math.h"
#include "daemon/reduce_kernels.h"

namespace collective::daemon::gpu {

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
