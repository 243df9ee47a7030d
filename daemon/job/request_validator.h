// Checks one submitted request on its own, before the daemon touches any
// memory: every field that can be judged without the other ranks' requests
// or the process set (agreement across ranks is mismatch.h's business; what
// needs the set's size, such as splits and the root, the ops').
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "collective/v1/types.pb.h"

namespace collective::daemon::job {

// Tensors may have at most this many dimensions.
inline constexpr uint32_t kMaxDims = 64;
// A group holds at most this many tensors.
inline constexpr uint32_t kMaxGroupSize = 65536;

struct RequestLimits {
  uint32_t max_name_bytes = 1024;
  uint32_t max_dims = kMaxDims;
  // Size of the submitting client's own arena: every input must lie in it.
  uint64_t arena_bytes = 0;
  // Whether this daemon was built with CUDA and NCCL (CUDA tensors).
  bool cuda = false;
};

// OK, or INVALID_ARGUMENT / UNIMPLEMENTED with a message that names the
// request, the field and the reason. For CUDA tensors, what can be judged
// without the client's registrations (the allocations and the event slot
// are the GPU executor's to check).
absl::Status ValidateRequest(const v1::TensorRequest& request, const RequestLimits& limits);

}  // namespace collective::daemon::job
