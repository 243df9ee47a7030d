// libFuzzer target: every request a client can submit, through the daemon's
// validator (daemon/job/request_validator), as the engine meets it: the
// serialized ClientMessage of one submission ring record.
//
// Input: a flags byte (bit 0: the daemon has CUDA), the name limit (u16),
// the client's arena size (u32), then the ClientMessage's bytes. Checked
// beyond "no crash": a request the validator accepts has what the ops rely
// on (its input inside the arena, a length its shape and dtype account for,
// splits that add up to its rows), and every refusal is INVALID_ARGUMENT or
// UNIMPLEMENTED with a message the client can receive (valid UTF-8).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "collective/v1/collective.pb.h"
#include "common/dtype.h"
#include "common/tensor_shape.h"
#include "daemon/job/request_validator.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/utf8.h"

namespace collective::fuzz {
namespace {

bool IsControl(v1::Collective collective) {
  return collective == v1::COLLECTIVE_BARRIER || collective == v1::COLLECTIVE_JOIN ||
         collective == v1::COLLECTIVE_ADD_PROCESS_SET ||
         collective == v1::COLLECTIVE_REMOVE_PROCESS_SET;
}

void CheckAccepted(const v1::TensorRequest& request, const daemon::job::RequestLimits& limits) {
  Require(!request.name().empty() && request.name().size() <= limits.max_name_bytes,
          "an accepted request has a name within the limit");
  if (IsControl(request.collective())) {
    Require(request.length() == 0, "an accepted control request carries no data");
    return;
  }
  const absl::StatusOr<uint64_t> elements = NumElements(ShapeOf(request.shape()));
  Require(elements.ok(), "an accepted request has a shape with a countable number of elements");
  uint64_t bytes = 0;
  Require(!__builtin_mul_overflow(*elements, ElementSize(request.dtype()), &bytes) &&
              bytes == request.length(),
          "an accepted request's length is its shape's elements times its dtype's size");
  if (request.memory() == v1::MEMORY_KIND_HOST) {
    uint64_t end = 0;
    Require(!__builtin_add_overflow(request.offset(), request.length(), &end) &&
                end <= limits.arena_bytes,
            "an accepted host request's input lies inside the client's arena");
  }
  if (request.splits_size() > 0) {
    int64_t total = 0;
    for (int64_t split : request.splits()) {
      Require(split >= 0 && !__builtin_add_overflow(total, split, &total),
              "an accepted request's splits are not negative and do not overflow");
    }
    Require(request.shape_size() > 0 && total == request.shape(0),
            "an accepted request's splits add up to its first dimension");
  }
}

}  // namespace

void FuzzOne(FuzzInput& input) {
  const uint8_t flags = input.Take<uint8_t>();
  daemon::job::RequestLimits limits;
  limits.cuda = (flags & 1) != 0;
  limits.max_name_bytes = input.Take<uint16_t>();
  limits.arena_bytes = input.Take<uint32_t>();
  const std::string_view bytes = input.Rest();
  v1::ClientMessage message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  for (const v1::TensorRequest& request : message.submit().requests()) {
    const absl::Status status = daemon::job::ValidateRequest(request, limits);
    if (status.ok()) {
      CheckAccepted(request, limits);
      continue;
    }
    Require(status.code() == absl::StatusCode::kInvalidArgument ||
                status.code() == absl::StatusCode::kUnimplemented,
            "the validator refuses with INVALID_ARGUMENT or UNIMPLEMENTED");
    Require(IsUtf8({status.message().data(), status.message().size()}),
            "the validator's message is valid UTF-8, so that it reaches the client");
  }
}

}  // namespace collective::fuzz
