#include "client/request_builder.h"

#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/reduce_op_check.h"
#include "common/status_macros.h"

namespace collective::internal {
namespace {

absl::Status CheckName(absl::string_view name, const v1::Limits& limits) {
  if (name.empty()) return absl::InvalidArgumentError("the tensor name is empty");
  if (name.size() > limits.max_name_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor name of ", name.size(), " bytes exceeds the limit of ", limits.max_name_bytes()));
  }
  return absl::OkStatus();
}

// Whether the daemon may write `request`'s result at arena offset `output`
// (`capacity` bytes), as it reduces or copies. A reducescatter block or a
// scatter root's rows land away from where they are read: over the input
// they would overwrite rows still to be read. Any other result over its
// input is written while later pieces of the input are still read: only in
// place (at the input's start) is that safe. The daemon refuses the others;
// their result is copied out instead.
bool DaemonMayWrite(const v1::TensorRequest& request, uint64_t output, uint64_t capacity) {
  const uint64_t input = request.offset();
  if (output >= input + request.length() || input >= output + capacity) return true;
  const v1::Collective collective = request.collective();
  return collective != v1::COLLECTIVE_REDUCESCATTER && collective != v1::COLLECTIVE_SCATTER &&
         output == input;
}

}  // namespace

absl::Status NeedsRows(absl::string_view collective, absl::string_view name,
                       const TensorView& input) {
  if (!input.shape.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      collective, " of '", name, "' needs a tensor of at least one dimension (its rows)"));
}

absl::StatusOr<PreparedRequest> PrepareDescription(ClientCore& core, v1::Collective collective,
                                                   absl::string_view name, const TensorView& input,
                                                   int32_t process_set, ProcessSet* set_out) {
  RETURN_IF_ERROR(CheckName(name, core.limits()));
  ASSIGN_OR_RETURN_WITH(const size_t bytes, input.bytes(), absl::StrCat("tensor '", name, "'"));
  if (input.shape.size() > core.limits().max_dims()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has ", input.shape.size(),
                                                   " dimensions; the limit is ",
                                                   core.limits().max_dims()));
  }
  ASSIGN_OR_RETURN(const ProcessSet set, core.FindProcessSet(process_set));
  if (!set.included(core.rank())) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", core.rank(),
                                                   " is not a member of process set ", process_set,
                                                   " [", absl::StrJoin(set.ranks, ", "), "]"));
  }
  if (set_out != nullptr) *set_out = set;

  PreparedRequest prepared;
  prepared.dtype = input.dtype;
  prepared.shape = input.shape;
  v1::TensorRequest& request = prepared.request;
  request.set_name(std::string(name));
  request.set_collective(collective);
  request.set_dtype(static_cast<v1::DataType>(input.dtype));
  for (int64_t dim : input.shape) request.add_shape(dim);
  request.set_length(bytes);
  request.set_process_set_id(process_set);
  if (input.device != Device::kCpu && input.device != Device::kCuda) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': unknown device ", static_cast<int32_t>(input.device)));
  }
  return prepared;
}

absl::StatusOr<PreparedRequest> PrepareData(ClientCore& core, v1::Collective collective,
                                            absl::string_view name, const TensorView& input,
                                            int32_t process_set, ProcessSet* set_out) {
  ASSIGN_OR_RETURN(PreparedRequest prepared,
                   PrepareDescription(core, collective, name, input, process_set, set_out));
  v1::TensorRequest& request = prepared.request;
  const uint64_t bytes = request.length();
  if (input.data == nullptr && bytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has no data"));
  }
  if (input.device == Device::kCuda) {
    request.set_memory(v1::MEMORY_KIND_CUDA);
    prepared.cuda = CudaTensor{.input = input.data, .stream = input.cuda_stream};
  } else if (auto in_arena = core.ArenaOffset(input.data, bytes)) {
    request.set_offset(*in_arena);  // zero-copy: the daemon reads the tensor where it is
  } else if (bytes > 0) {
    ASSIGN_OR_RETURN(prepared.staging, core.Allocate(bytes));
    std::memcpy(core.arena() + prepared.staging, input.data, bytes);
    request.set_offset(prepared.staging);
  }
  return prepared;
}

absl::StatusOr<PreparedRequest> PrepareReduction(ClientCore& core, v1::Collective collective,
                                                 absl::string_view name, const TensorView& input,
                                                 const AllreduceOptions& options, ProcessSet* set) {
  RETURN_IF_ERROR_WITH(
      CheckReduceOp(static_cast<v1::ReduceOp>(options.op), static_cast<v1::DataType>(input.dtype),
                    static_cast<v1::AdasumScope>(options.adasum_scope)),
      absl::StrCat("tensor '", name, "'"));
  ASSIGN_OR_RETURN(PreparedRequest prepared,
                   PrepareData(core, collective, name, input, options.process_set, set));
  v1::TensorRequest& request = prepared.request;
  request.set_op(static_cast<v1::ReduceOp>(options.op));
  if (options.prescale != 1.0) request.set_prescale(options.prescale);
  if (options.postscale != 1.0) request.set_postscale(options.postscale);
  request.set_adasum_scope(static_cast<v1::AdasumScope>(options.adasum_scope));
  return prepared;
}

void SetOutput(PreparedRequest& prepared, void* output, uint64_t capacity) {
  prepared.output = output;
  prepared.output_capacity = capacity;
  if (prepared.cuda.has_value()) {
    if (output == nullptr) {
      prepared.output = const_cast<void*>(prepared.cuda->input);  // in place
    }
    prepared.cuda->output = prepared.output;
    prepared.cuda->output_bytes = capacity;
  }
}

void SetOutputInArena(const ClientCore& core, PreparedRequest& prepared) {
  if (prepared.cuda.has_value() || prepared.output == nullptr) return;
  const uint64_t length = prepared.request.length();
  const std::optional<uint64_t> in_arena = core.ArenaOffset(prepared.output, length);
  if (!in_arena.has_value() ||
      !DaemonMayWrite(prepared.request, *in_arena, prepared.output_capacity)) {
    return;
  }
  prepared.request.set_output_offset(*in_arena);  // the daemon writes the result there
}

absl::StatusOr<Client::Handle> SubmitRooted(ClientCore& core,
                                            absl::StatusOr<PreparedRequest> prepared,
                                            const ProcessSet& set, int root_rank, void* output,
                                            uint64_t capacity, uint64_t in_arena) {
  if (!prepared.ok()) return prepared.status();
  std::vector<PreparedRequest> requests;
  requests.push_back(std::move(*prepared));
  v1::TensorRequest& request = requests.front().request;
  if (root_rank < 0 || root_rank >= set.size()) {
    Discard(core, requests);
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveName(request.collective()), " of '", request.name(), "': root rank ", root_rank,
        " is not a rank of process set ", set.id, " (size ", set.size(), ")"));
  }
  request.set_root_rank(root_rank);
  SetOutput(requests.front(), output, capacity);
  if (output != nullptr && in_arena > 0 && !requests.front().cuda.has_value()) {
    const std::optional<uint64_t> offset = core.ArenaOffset(output, in_arena);
    if (offset.has_value() && DaemonMayWrite(request, *offset, in_arena)) {
      request.set_output_offset(*offset);
    }
  }
  ASSIGN_OR_RETURN(std::vector<Client::Handle> handles, core.Submit(std::move(requests), false));
  return handles.front();
}

PreparedRequest PrepareControl(v1::Collective collective, const char* name, int32_t process_set) {
  PreparedRequest prepared;
  prepared.request.set_name(name);
  prepared.request.set_collective(collective);
  prepared.request.set_process_set_id(process_set);
  return prepared;
}

void Discard(ClientCore& core, std::vector<PreparedRequest>& requests) {
  for (PreparedRequest& prepared : requests) {
    if (prepared.staging != ClientCore::kNoStaging) core.Free(prepared.staging);
    prepared.staging = ClientCore::kNoStaging;
  }
}

}  // namespace collective::internal
