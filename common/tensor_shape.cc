#include "common/tensor_shape.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace collective {

absl::StatusOr<uint64_t> NumElements(std::span<const int64_t> shape) {
  uint64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension ", i, " of shape ", ShapeString(shape), " is negative"));
    }
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(shape[i]), &count)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " has more elements than fit in 64 bits"));
    }
  }
  return count;
}

std::string ShapeString(std::span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace collective
