// The one place where absl::Status and grpc::Status meet. Their codes are the
// same google.rpc.Code values, so the mapping is one-to-one.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace collective {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// A code received as a plain integer (e.g. in a completion record), mapped
// to absl::StatusCode; anything outside google.rpc.Code becomes kUnknown.
absl::StatusCode StatusCodeFromInt(int code);

}  // namespace collective
