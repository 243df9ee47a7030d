// Checks one submitted request on its own, before the daemon touches any
// memory: every field that can be judged without the other ranks' requests.
// (Agreement across ranks is the coordinator's business, see mismatch.h.)
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "collective/v1/types.pb.h"

namespace collective::daemon {

// Tensors may have at most this many dimensions.
inline constexpr uint32_t kMaxDims = 64;

struct RequestLimits {
  uint32_t max_name_bytes = 1024;
  uint32_t max_dims = kMaxDims;
  // Size of the submitting client's own arena: every input must lie in it.
  uint64_t arena_bytes = 0;
};

// OK, or INVALID_ARGUMENT / UNIMPLEMENTED with a message that names the
// request, the field and the reason.
absl::Status ValidateRequest(const v1::TensorRequest& request, const RequestLimits& limits);

}  // namespace collective::daemon
