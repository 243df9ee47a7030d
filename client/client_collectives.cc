// collective::Client: the collectives.
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/client_core.h"
#include "client/request_builder.h"
#include "collective/client.h"
#include "common/status_macros.h"

namespace collective {
namespace {

using internal::NeedsRows;
using internal::PreparedRequest;

int64_t Rows(const TensorView& input) { return input.shape.empty() ? 0 : input.shape.front(); }

// Bytes of one row: every dimension but the first.
uint64_t RowBytes(const TensorView& input) {
  uint64_t bytes = DataTypeSize(input.dtype);
  for (size_t i = 1; i < input.shape.size(); ++i) bytes *= static_cast<uint64_t>(input.shape[i]);
  return bytes;
}

// Submits one prepared request whose result goes to `output`.
absl::StatusOr<Client::Handle> SubmitOne(internal::ClientCore& core,
                                         absl::StatusOr<PreparedRequest> prepared, void* output,
                                         uint64_t capacity) {
  if (!prepared.ok()) return prepared.status();
  internal::SetOutput(*prepared, output, capacity);
  std::vector<PreparedRequest> requests;
  requests.push_back(std::move(*prepared));
  ASSIGN_OR_RETURN(std::vector<Client::Handle> handles, core.Submit(std::move(requests), false));
  return handles.front();
}

// A CUDA tensor's result lands in device memory the caller names; an empty
// result names none (an empty CUDA tensor has no address).
absl::Status NeedsOutput(absl::string_view collective, absl::string_view name,
                         const TensorView& input, const void* output, uint64_t capacity) {
  if (input.device != Device::kCuda || output != nullptr || capacity == 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      collective, " of CUDA tensor '", name,
      "' needs an output in CUDA memory (the form of the call that takes output and its size)"));
}

}  // namespace

absl::StatusOr<Client::Handle> Client::AllreduceAsync(absl::string_view name,
                                                      const TensorView& input, void* output,
                                                      const AllreduceOptions& options) {
  ASSIGN_OR_RETURN(std::vector<Handle> handles,
                   GroupedAllreduceAsync({std::string(name)}, {input}, {output}, options));
  return handles.front();
}

absl::Status Client::Allreduce(absl::string_view name, const TensorView& input, void* output,
                               const AllreduceOptions& options) {
  ASSIGN_OR_RETURN(const Handle handle, AllreduceAsync(name, input, output, options));
  return Wait(handle).status();
}

absl::StatusOr<std::vector<Client::Handle>> Client::GroupedAllreduceAsync(
    const std::vector<std::string>& names, const std::vector<TensorView>& inputs,
    const std::vector<void*>& outputs, const AllreduceOptions& options) {
  if (names.size() != inputs.size() || names.size() != outputs.size() || names.empty()) {
    return absl::InvalidArgumentError(
        "a grouped allreduce needs one name, input and output per tensor, and at least one");
  }
  std::vector<PreparedRequest> requests;
  for (size_t i = 0; i < names.size(); ++i) {
    auto prepared =
        internal::PrepareReduction(*core_, v1::COLLECTIVE_ALLREDUCE, names[i], inputs[i], options);
    if (!prepared.ok()) {
      internal::Discard(*core_, requests);
      return prepared.status();
    }
    requests.push_back(std::move(*prepared));
    PreparedRequest& request = requests.back();
    internal::SetOutput(request, outputs[i], request.request.length());
    internal::SetOutputInArena(*core_, request);
  }
  return core_->Submit(std::move(requests), /*grouped=*/names.size() > 1);
}

absl::StatusOr<Client::Handle> Client::AllgatherAsync(absl::string_view name,
                                                      const TensorView& input,
                                                      int32_t process_set) {
  ASSIGN_OR_RETURN(std::vector<Handle> handles,
                   GroupedAllgatherAsync({std::string(name)}, {input}, process_set));
  return handles.front();
}

absl::StatusOr<std::vector<Client::Handle>> Client::GroupedAllgatherAsync(
    const std::vector<std::string>& names, const std::vector<TensorView>& inputs,
    int32_t process_set) {
  return GroupedAllgatherAsync(names, inputs, {}, {}, process_set);
}

absl::StatusOr<std::vector<Client::Handle>> Client::GroupedAllgatherAsync(
    const std::vector<std::string>& names, const std::vector<TensorView>& inputs,
    const std::vector<void*>& outputs, const std::vector<size_t>& output_bytes,
    int32_t process_set) {
  // No outputs at all: the results are views.
  const bool views = outputs.empty() && output_bytes.empty();
  if (names.size() != inputs.size() || names.empty() ||
      (!views && (outputs.size() != names.size() || output_bytes.size() != names.size()))) {
    return absl::InvalidArgumentError(
        "a grouped allgather needs one name and input per tensor (and one output with its size, "
        "if any has one), and at least one tensor");
  }
  std::vector<PreparedRequest> requests;
  for (size_t i = 0; i < names.size(); ++i) {
    void* const output = views ? nullptr : outputs[i];
    absl::Status checked = NeedsRows("allgather", names[i], inputs[i]);
    if (checked.ok() && !views) {
      checked = NeedsOutput("allgather", names[i], inputs[i], output, output_bytes[i]);
    }
    if (checked.ok() && !views && output == nullptr && inputs[i].device != Device::kCuda) {
      checked =
          absl::InvalidArgumentError(absl::StrCat("allgather of '", names[i], "': output is null"));
    }
    if (!checked.ok()) {
      internal::Discard(*core_, requests);
      return checked;
    }
    auto prepared =
        internal::PrepareData(*core_, v1::COLLECTIVE_ALLGATHER, names[i], inputs[i], process_set);
    if (!prepared.ok()) {
      internal::Discard(*core_, requests);
      return prepared.status();
    }
    requests.push_back(std::move(*prepared));
    if (!views) internal::SetOutput(requests.back(), output, output_bytes[i]);
  }
  return core_->Submit(std::move(requests), /*grouped=*/names.size() > 1);
}

absl::StatusOr<Client::Handle> Client::AllgatherAsync(absl::string_view name,
                                                      const TensorView& input, void* output,
                                                      size_t output_bytes, int32_t process_set) {
  ASSIGN_OR_RETURN(
      std::vector<Handle> handles,
      GroupedAllgatherAsync({std::string(name)}, {input}, {output}, {output_bytes}, process_set));
  return handles.front();
}

absl::StatusOr<Client::Handle> Client::BroadcastAsync(absl::string_view name,
                                                      const TensorView& input, void* output,
                                                      int root_rank, int32_t process_set) {
  ProcessSet set;
  auto prepared =
      internal::PrepareData(*core_, v1::COLLECTIVE_BROADCAST, name, input, process_set, &set);
  const uint64_t length = prepared.ok() ? prepared->request.length() : 0;
  // An output in the arena gets the root's bytes from the daemon.
  return internal::SubmitRooted(*core_, std::move(prepared), set, root_rank, output, length,
                                length);
}

absl::StatusOr<Client::Handle> Client::AlltoallAsync(absl::string_view name,
                                                     const TensorView& input,
                                                     const std::vector<int64_t>& splits,
                                                     int32_t process_set) {
  return AlltoallAsync(name, input, splits, nullptr, 0, process_set);
}

absl::StatusOr<Client::Handle> Client::AlltoallAsync(absl::string_view name,
                                                     const TensorView& input,
                                                     const std::vector<int64_t>& splits,
                                                     void* output, size_t output_bytes,
                                                     int32_t process_set) {
  RETURN_IF_ERROR(NeedsRows("alltoall", name, input));
  ASSIGN_OR_RETURN(const ProcessSet set, core_->FindProcessSet(process_set));
  const int64_t rows = Rows(input);
  if (splits.empty()) {
    if (rows % set.size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "alltoall of '", name, "': the first dimension ", rows, " does not divide evenly among ",
          set.size(), " ranks; pass splits to say how many rows go to each rank"));
    }
  } else {
    if (splits.size() != static_cast<size_t>(set.size())) {
      return absl::InvalidArgumentError(absl::StrCat("alltoall of '", name, "': ", splits.size(),
                                                     " splits for a process set of ", set.size(),
                                                     " ranks"));
    }
    for (int64_t split : splits) {
      if (split < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("alltoall of '", name, "': split ", split, " is negative"));
      }
    }
    const int64_t total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
    if (total != rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("alltoall of '", name, "': the splits [", absl::StrJoin(splits, ", "),
                       "] add up to ", total, " rows, not the first dimension ", rows));
    }
  }
  // After the splits: a caller that sizes the output from them (collective.torch)
  // submits bad ones without an output, to hear what is wrong with them.
  RETURN_IF_ERROR(NeedsOutput("alltoall", name, input, output, output_bytes));
  ASSIGN_OR_RETURN(PreparedRequest prepared, internal::PrepareData(*core_, v1::COLLECTIVE_ALLTOALL,
                                                                   name, input, process_set));
  for (int64_t split : splits) prepared.request.add_splits(split);
  return SubmitOne(*core_, std::move(prepared), output, output_bytes);
}

absl::StatusOr<Client::Handle> Client::ReducescatterAsync(absl::string_view name,
                                                          const TensorView& input, void* output,
                                                          const ReducescatterOptions& options) {
  ASSIGN_OR_RETURN(std::vector<Handle> handles,
                   GroupedReducescatterAsync({std::string(name)}, {input}, {output}, options));
  return handles.front();
}

absl::StatusOr<std::vector<Client::Handle>> Client::GroupedReducescatterAsync(
    const std::vector<std::string>& names, const std::vector<TensorView>& inputs,
    const std::vector<void*>& outputs, const ReducescatterOptions& options) {
  if (names.size() != inputs.size() || names.size() != outputs.size() || names.empty()) {
    return absl::InvalidArgumentError(
        "a grouped reducescatter needs one name, input and output per tensor, and at least one");
  }
  if (options.op != ReduceOp::kSum && options.op != ReduceOp::kAverage) {
    return absl::InvalidArgumentError("reducescatter supports the sum and average reduce ops");
  }
  std::vector<PreparedRequest> requests;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::Status checked = NeedsRows("reducescatter", names[i], inputs[i]);
    if (!checked.ok()) {
      internal::Discard(*core_, requests);
      return checked;
    }
    ProcessSet set;
    auto prepared = internal::PrepareReduction(*core_, v1::COLLECTIVE_REDUCESCATTER, names[i],
                                               inputs[i], options, &set);
    if (!prepared.ok()) {
      internal::Discard(*core_, requests);
      return prepared.status();
    }
    requests.push_back(std::move(*prepared));
    PreparedRequest& request = requests.back();
    // This rank's block: the first (rows mod size) ranks get one row more.
    const int64_t rows = Rows(inputs[i]);
    const int64_t set_rank = set.rank_of(rank());
    const int64_t mine = rows / set.size() + (set_rank < rows % set.size() ? 1 : 0);
    const uint64_t capacity = static_cast<uint64_t>(mine) * RowBytes(inputs[i]);
    checked = NeedsOutput("reducescatter", names[i], inputs[i], outputs[i], capacity);
    if (!checked.ok()) {
      internal::Discard(*core_, requests);
      return checked;
    }
    internal::SetOutput(request, outputs[i], capacity);
    internal::SetOutputInArena(*core_, request);
  }
  return core_->Submit(std::move(requests), /*grouped=*/names.size() > 1);
}

absl::Status Client::Barrier(int32_t process_set) {
  RETURN_IF_ERROR(CheckMember(process_set));
  std::vector<PreparedRequest> requests;
  requests.push_back(
      internal::PrepareControl(v1::COLLECTIVE_BARRIER, internal::kBarrierName, process_set));
  ASSIGN_OR_RETURN(std::vector<Handle> handles, core_->Submit(std::move(requests), false));
  return Wait(handles.front()).status();
}

absl::StatusOr<int> Client::Join(int32_t process_set) {
  RETURN_IF_ERROR(CheckMember(process_set));
  std::vector<PreparedRequest> requests;
  requests.push_back(
      internal::PrepareControl(v1::COLLECTIVE_JOIN, internal::kJoinName, process_set));
  ASSIGN_OR_RETURN(std::vector<Handle> handles, core_->Submit(std::move(requests), false));
  ASSIGN_OR_RETURN(internal::FinishedRequest finished,
                   core_->Wait(handles.front(), absl::InfiniteDuration()));
  return static_cast<int>(finished.record.result_dim0);
}

absl::StatusOr<ProcessSet> Client::AddProcessSet(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", ranks[i], " is not a rank of the job (0 to ", size() - 1, ")"));
    }
    if (i > 0 && ranks[i] == ranks[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", ranks[i], " is listed twice in the new process set"));
    }
  }
  if (ranks.empty()) return absl::InvalidArgumentError("a process set needs at least one rank");
  for (const ProcessSet& existing : core_->ProcessSets()) {
    if (existing.ranks == ranks) {
      return absl::InvalidArgumentError(
          existing.id == kGlobalProcessSet
              ? absl::StrCat("process set [", absl::StrJoin(ranks, ", "),
                             "] is the global process set (id 0), which always exists")
              : absl::StrCat("process set [", absl::StrJoin(ranks, ", "), "] exists already (id ",
                             existing.id, ")"));
    }
  }
  std::vector<PreparedRequest> requests;
  requests.push_back(internal::PrepareControl(v1::COLLECTIVE_ADD_PROCESS_SET,
                                              internal::kAddProcessSetName, kGlobalProcessSet));
  for (int rank : ranks) requests.front().request.add_process_set_ranks(rank);
  ASSIGN_OR_RETURN(std::vector<Handle> handles, core_->Submit(std::move(requests), false));
  ASSIGN_OR_RETURN(internal::FinishedRequest finished,
                   core_->Wait(handles.front(), absl::InfiniteDuration()));
  ProcessSet set{.id = static_cast<int32_t>(finished.record.result_dim0), .ranks = ranks};
  core_->AddProcessSet(set);
  return set;
}

absl::Status Client::RemoveProcessSet(int32_t id) {
  if (id == kGlobalProcessSet) {
    return absl::InvalidArgumentError("the global process set (id 0) cannot be removed");
  }
  RETURN_IF_ERROR(core_->FindProcessSet(id).status());
  std::vector<PreparedRequest> requests;
  requests.push_back(internal::PrepareControl(v1::COLLECTIVE_REMOVE_PROCESS_SET,
                                              internal::kRemoveProcessSetName, kGlobalProcessSet));
  requests.front().request.set_target_process_set_id(id);
  ASSIGN_OR_RETURN(std::vector<Handle> handles, core_->Submit(std::move(requests), false));
  RETURN_IF_ERROR(core_->Wait(handles.front(), absl::InfiniteDuration()).status());
  core_->ForgetProcessSet(id);
  return absl::OkStatus();
}

}  // namespace collective
