// Shapes as they travel on the wire: a list of int64 dimensions.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <google/protobuf/repeated_field.h>

#include "absl/status/statusor.h"

namespace collective {

// Product of the dimensions. Fails on a negative dimension or when the
// product overflows uint64. The empty shape (a scalar) has one element.
absl::StatusOr<uint64_t> NumElements(std::span<const int64_t> shape);

// "[17, 3]"; "[]" for a scalar.
std::string ShapeString(std::span<const int64_t> shape);

// A shape as it arrives in a protobuf message.
inline std::span<const int64_t> ShapeOf(const google::protobuf::RepeatedField<int64_t>& shape) {
  return {shape.data(), static_cast<size_t>(shape.size())};
}

}  // namespace collective
