// Which reduce op a reduction of a tensor may use: the checks libcollective
// makes at the call and the daemon makes again on every request (it trusts
// no client), in one place with one text each. What only the daemon can
// judge (the collective, the memory kind, what its kernels reduce) stays in
// its request validator.
#pragma once

#include "absl/status/status.h"
#include "collective/v1/types.pb.h"

namespace collective {

// INVALID_ARGUMENT when an Adasum scope other than ranks comes with another
// reduce op than Adasum, when Adasum is asked of a tensor that is not
// floating-point, or when a bool tensor is reduced by another op than min
// or max. The message does not name the tensor: callers add that.
absl::Status CheckReduceOp(v1::ReduceOp op, v1::DataType dtype, v1::AdasumScope scope);

}  // namespace collective
