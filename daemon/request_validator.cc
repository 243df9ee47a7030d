#include "daemon/request_validator.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/tensor_shape.h"
#include "daemon/reduce_kernels.h"

namespace collective::daemon {
namespace {

std::string Describe(const v1::TensorRequest& request, uint32_t max_name_bytes) {
  // Quote at most a bounded prefix (the name itself may be the problem), cut
  // on a character boundary: the message must stay valid UTF-8 to reach the
  // client at all.
  size_t shown = std::min<size_t>(request.name().size(), std::min<uint32_t>(max_name_bytes, 128));
  while (shown < request.name().size() && shown > 0 &&
         (static_cast<unsigned char>(request.name()[shown]) & 0xc0) == 0x80) {
    --shown;
  }
  std::string name = request.name().substr(0, shown);
  for (char& c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return absl::StrCat("request ", request.request_id(), " ('", name,
                      shown < request.name().size() ? "...'" : "'", ")");
}

absl::Status CheckScale(const char* field, bool present, double value, v1::DataType dtype) {
  if (!present || value == 1.0) return absl::OkStatus();
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", value, " is not a finite number"));
  }
  if (dtype == v1::DATA_TYPE_BOOL) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be 1 for bool tensors"));
  }
  return absl::OkStatus();
}

absl::Status ValidateFields(const v1::TensorRequest& request, const RequestLimits& limits) {
  const std::string& name = request.name();
  if (name.empty()) return absl::InvalidArgumentError("the tensor name is empty");
  if (name.size() > limits.max_name_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the tensor name has ", name.size(),
                                                   " bytes; the limit is ", limits.max_name_bytes));
  }
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("the tensor name contains a control character");
    }
  }

  if (!v1::Collective_IsValid(request.collective()) ||
      request.collective() == v1::COLLECTIVE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown collective ", CollectiveName(request.collective())));
  }
  if (request.collective() != v1::COLLECTIVE_ALLREDUCE) {
    return absl::UnimplementedError(absl::StrCat(CollectiveName(request.collective()),
                                                 " is not supported by this daemon version"));
  }

  const v1::DataType dtype = request.dtype();
  if (ElementSize(dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", DataTypeName(dtype)));
  }
  const v1::ReduceOp op = request.op();
  if (!v1::ReduceOp_IsValid(op) || op == v1::REDUCE_OP_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat("unknown reduce op ", ReduceOpName(op)));
  }
  if (op == v1::REDUCE_OP_ADASUM) {
    return absl::UnimplementedError("the adasum reduce op is not implemented");
  }
  const v1::ReduceOp kernel_op = op == v1::REDUCE_OP_AVERAGE ? v1::REDUCE_OP_SUM : op;
  if (!exec::IsReducible(dtype, kernel_op)) {
    return absl::InvalidArgumentError(absl::StrCat("reduce op ", ReduceOpName(op),
                                                   " is not defined for ", DataTypeName(dtype),
                                                   " tensors (bool supports min and max)"));
  }
  if (absl::Status status =
          CheckScale("prescale", request.has_prescale(), request.prescale(), dtype);
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          CheckScale("postscale", request.has_postscale(), request.postscale(), dtype);
      !status.ok()) {
    return status;
  }

  if (request.shape_size() > static_cast<int>(limits.max_dims)) {
    return absl::InvalidArgumentError(absl::StrCat("the shape has ", request.shape_size(),
                                                   " dimensions; the limit is ", limits.max_dims));
  }
  const auto elements = NumElements(ShapeOf(request.shape()));
  if (!elements.ok()) return absl::InvalidArgumentError(elements.status().message());
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(*elements, ElementSize(dtype), &bytes) || bytes != request.length()) {
    return absl::InvalidArgumentError(
        absl::StrCat("length ", request.length(), " does not match shape ",
                     ShapeString(ShapeOf(request.shape())), " of ", DataTypeName(dtype), " (",
                     *elements, " elements of ", ElementSize(dtype), " bytes)"));
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(request.offset(), request.length(), &end) ||
      end > limits.arena_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", request.offset(), " + length ", request.length(),
                     " lies outside the client's arena of ", limits.arena_bytes, " bytes"));
  }

  if (request.process_set_id() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("process set ", request.process_set_id(), " does not exist"));
  }
  if (request.group_id() != 0) {
    return absl::UnimplementedError("grouped requests are not supported by this daemon version");
  }
  if (request.splits_size() != 0) {
    return absl::InvalidArgumentError("splits apply only to alltoall");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRequest(const v1::TensorRequest& request, const RequestLimits& limits) {
  absl::Status status = ValidateFields(request, limits);
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(Describe(request, limits.max_name_bytes), ": ",
                                                  status.message()));
}

}  // namespace collective::daemon
