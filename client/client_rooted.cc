// collective::Client: the rooted collectives (reduce, gather, scatter).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_core.h"
#include "client/request_builder.h"
#include "collective/client.h"
#include "common/status_macros.h"

namespace collective {

using internal::NeedsRows;
using internal::SubmitRooted;

absl::StatusOr<Client::Handle> Client::ReduceAsync(absl::string_view name, const TensorView& input,
                                                   void* output, int root_rank,
                                                   const AllreduceOptions& options) {
  if (options.op == ReduceOp::kAdasum) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce of '", name, "': the adasum reduce op applies to allreduce only"));
  }
  ProcessSet set;
  auto prepared =
      internal::PrepareReduction(*core_, v1::COLLECTIVE_REDUCE, name, input, options, &set);
  // Only the root receives the result, and only its output can be the
  // daemon's to write. Another rank's CUDA output is not handed on: it is
  // never written, and may be smaller than the input (or null).
  const bool root = set.rank_of(rank()) == root_rank;
  const uint64_t length = prepared.ok() ? prepared->request.length() : 0;
  const bool unused_device_output = !root && input.device == Device::kCuda;
  return SubmitRooted(*core_, std::move(prepared), set, root_rank,
                      unused_device_output ? nullptr : output, unused_device_output ? 0 : length,
                      root ? length : 0);
}

absl::StatusOr<Client::Handle> Client::GatherAsync(absl::string_view name, const TensorView& input,
                                                   int root_rank, int32_t process_set, void* output,
                                                   size_t output_bytes) {
  RETURN_IF_ERROR(NeedsRows("gather", name, input));
  if (input.device == Device::kCuda && output == nullptr) {
    // Only the root receives rows; its output cannot be a view of the
    // result segment, which holds host memory.
    ASSIGN_OR_RETURN(const ProcessSet found, core_->FindProcessSet(process_set));
    if (found.rank_of(rank()) == root_rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("gather of '", name,
                       "': the root of a gather of CUDA tensors needs an output in device "
                       "memory for every rank's rows"));
    }
  }
  ProcessSet set;
  auto prepared =
      internal::PrepareData(*core_, v1::COLLECTIVE_GATHER, name, input, process_set, &set);
  return SubmitRooted(*core_, std::move(prepared), set, root_rank, output, output_bytes, 0);
}

absl::StatusOr<Client::Handle> Client::ScatterAsync(absl::string_view name, const TensorView& input,
                                                    int64_t receive_rows, int root_rank,
                                                    int32_t process_set, void* output,
                                                    size_t output_bytes) {
  RETURN_IF_ERROR(NeedsRows("scatter", name, input));
  if (receive_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("scatter of '", name, "': receive_rows ", receive_rows, " is negative"));
  }
  uint64_t row_bytes = DataTypeSize(input.dtype);
  for (size_t i = 1; i < input.shape.size(); ++i) {
    row_bytes *= static_cast<uint64_t>(std::max<int64_t>(input.shape[i], 0));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(row_bytes, static_cast<uint64_t>(receive_rows), &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("scatter of '", name, "': ", receive_rows,
                                                   " rows are more bytes than a tensor can hold"));
  }
  if (input.device == Device::kCuda && output == nullptr && bytes > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("scatter of '", name,
                     "': a scatter of CUDA tensors needs an output in device "
                     "memory for this rank's ",
                     receive_rows, " rows"));
  }
  if (output != nullptr && output_bytes < bytes) {
    return absl::InvalidArgumentError(absl::StrCat("scatter of '", name, "': the output holds ",
                                                   output_bytes, " bytes; ", receive_rows,
                                                   " rows need ", bytes));
  }
  ProcessSet set;
  auto prepared =
      internal::PrepareData(*core_, v1::COLLECTIVE_SCATTER, name, input, process_set, &set);
  if (prepared.ok()) prepared->request.set_receive_rows(receive_rows);
  return SubmitRooted(*core_, std::move(prepared), set, root_rank, output, output_bytes, bytes);
}

}  // namespace collective
