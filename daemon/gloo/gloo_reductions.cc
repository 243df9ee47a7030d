#include "daemon/gloo/gloo_reductions.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "daemon/exec/reduce_kernels.h"

namespace collective::daemon::gloo {

absl::StatusOr<ElementReduction> KernelReduction(v1::DataType dtype, v1::ReduceOp op) {
  const size_t element = ElementSize(dtype);
  if (element == 0 || !exec::IsReducible(dtype, op)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot combine ", DataTypeName(dtype),
                                                   " tensors with ", ReduceOpName(op),
                                                   " across nodes"));
  }
  const exec::ReduceSpec spec{.dtype = dtype, .op = op};
  return ElementReduction([spec, element](void* out, const void* a, const void* b, size_t count) {
    if (count == 0) return;
    const void* inputs[] = {a, b};
    // The kernel's output may alias its first input only: when Gloo asks
    // for out = a op b with out == b, reduce into a scratch copy first
    // (operand order matters for NaN payloads).
    if (out != b || out == a) {
      exec::Reduce(spec, inputs, out, count);
      return;
    }
    std::vector<std::byte> scratch(count * element);
    exec::Reduce(spec, inputs, scratch.data(), count);
    std::memcpy(out, scratch.data(), scratch.size());
  });
}

}  // namespace collective::daemon::gloo
