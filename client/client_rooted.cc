// collective::Client: the rooted collectives (reduce, gather, scatter).
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client_core.h"
#include "client/request_builder.h"
#include "collective/client.h"
#include "common/dtype.h"
#include "common/status_macros.h"

namespace collective {
namespace {

using internal::NeedsRows;
using internal::PreparedRequest;

// Sets the root and the output of a prepared rooted request and submits it,
// or gives its staging back when the root is not a rank of `set`. An output
// of `in_arena` bytes that lies in this client's arena is one the daemon
// writes itself (0: never).
absl::StatusOr<Client::Handle> SubmitRooted(internal::ClientCore& core,
                                            absl::StatusOr<PreparedRequest> prepared,
                                            const ProcessSet& set, int root_rank, void* output,
                                            uint64_t capacity, uint64_t in_arena) {
  if (!prepared.ok()) return prepared.status();
  std::vector<PreparedRequest> requests;
  requests.push_back(std::move(*prepared));
  v1::TensorRequest& request = requests.front().request;
  if (root_rank < 0 || root_rank >= set.size()) {
    internal::Discard(core, requests);
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveName(request.collective()), " of '", request.name(), "': root rank ", root_rank,
        " is not a rank of process set ", set.id, " (size ", set.size(), ")"));
  }
  request.set_root_rank(root_rank);
  internal::SetOutput(requests.front(), output, capacity);
  if (output != nullptr && in_arena > 0 && !requests.front().cuda.has_value()) {
    if (auto offset = core.ArenaOffset(output, in_arena)) request.set_output_offset(*offset);
  }
  ASSIGN_OR_RETURN(std::vector<Client::Handle> handles, core.Submit(std::move(requests), false));
  return handles.front();
}

}  // namespace

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
  // daemon's to write.
  const bool root = set.rank_of(rank()) == root_rank;
  const uint64_t length = prepared.ok() ? prepared->request.length() : 0;
  return SubmitRooted(*core_, std::move(prepared), set, root_rank, output, length,
                      root ? length : 0);
}

absl::StatusOr<Client::Handle> Client::GatherAsync(absl::string_view name, const TensorView& input,
                                                   int root_rank, int32_t process_set, void* output,
                                                   size_t output_bytes) {
  RETURN_IF_ERROR(NeedsRows("gather", name, input));
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
