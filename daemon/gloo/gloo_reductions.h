// Gloo's element reductions, done by this daemon's kernels
// (exec/reduce_kernels.h): the function a Gloo collective calls to combine
// two nodes' buffers, so that combining nodes follows exactly the rules of
// the local reduction (integers wrap, NaNs propagate as documented, bool is
// logical). Plain functions; any thread may call them.
#pragma once

#include <cstddef>
#include <functional>

#include "absl/status/statusor.h"
#include "collective/v1/types.pb.h"

namespace collective::daemon::gloo {

// out[i] = a[i] op b[i] for `count` elements: the signature of Gloo's
// reduce functions (AllreduceOptions::Func, ReduceOptions::Func). `out`
// may be `a` or `b`, or neither.
using ElementReduction = std::function<void(void* out, const void* a, const void* b, size_t count)>;

// The reduction of `op` on `dtype` with the daemon's kernels, or an error
// naming both when the kernels cannot combine them (ADASUM, AVERAGE, an op
// other than MIN and MAX on bool, an unknown type).
absl::StatusOr<ElementReduction> KernelReduction(v1::DataType dtype, v1::ReduceOp op);

}  // namespace collective::daemon::gloo
