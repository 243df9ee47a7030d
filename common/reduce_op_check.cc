#include "common/reduce_op_check.h"

#include "absl/strings/str_cat.h"
#include "common/dtype.h"

namespace collective {

absl::Status CheckReduceOp(v1::ReduceOp op, v1::DataType dtype, v1::AdasumScope scope) {
  if (scope != v1::ADASUM_SCOPE_RANKS && op != v1::REDUCE_OP_ADASUM) {
    return absl::InvalidArgumentError(
        absl::StrCat("an Adasum scope applies to the adasum reduce op, not ", ReduceOpName(op)));
  }
  if (op == v1::REDUCE_OP_ADASUM && !IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce op adasum is not defined for ", DataTypeName(dtype),
                     " tensors (it supports float16, bfloat16, float32 and float64)"));
  }
  if (dtype == v1::DATA_TYPE_BOOL && op != v1::REDUCE_OP_MIN && op != v1::REDUCE_OP_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce op ", ReduceOpName(op),
                     " is not defined for bool tensors (bool supports min and "
                     "max)"));
  }
  return absl::OkStatus();
}

}  // namespace collective
