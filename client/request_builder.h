// Turns a call of the client API into a request the daemon will accept:
// checks what the client can judge itself (so that argument errors surface at
// the call, as Horovod users expect), and places the input in the arena.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/client_core.h"
#include "collective/client.h"

namespace collective::internal {

// Names of the control collectives: one outstanding per rank at a time.
inline constexpr char kBarrierName[] = "__collective__.barrier";
inline constexpr char kJoinName[] = "__collective__.join";
inline constexpr char kAddProcessSetName[] = "__collective__.add_process_set";
inline constexpr char kRemoveProcessSetName[] = "__collective__.remove_process_set";

// A data collective's request: name, dtype, shape and process set checked
// (this rank must be a member; the set is stored in `set` if not null),
// input in the arena (copied there unless it already is), or, for a CUDA
// tensor, left where it is (ClientCore::Submit resolves it). The caller sets
// the collective's own fields and its output (SetOutput), and Discards the
// request if it gives up.
absl::StatusOr<PreparedRequest> PrepareData(ClientCore& core, v1::Collective collective,
                                            absl::string_view name, const TensorView& input,
                                            int32_t process_set, ProcessSet* set = nullptr);

// PrepareData's checks and request without the input's data (a receive's
// `like`, whose data is never read): nothing is staged.
absl::StatusOr<PreparedRequest> PrepareDescription(ClientCore& core, v1::Collective collective,
                                                   absl::string_view name, const TensorView& input,
                                                   int32_t process_set, ProcessSet* set = nullptr);

// PrepareData for allreduce and reducescatter, with the reduction op and
// scale factors, which are checked before the input is staged.
absl::StatusOr<PreparedRequest> PrepareReduction(ClientCore& core, v1::Collective collective,
                                                 absl::string_view name, const TensorView& input,
                                                 const AllreduceOptions& options,
                                                 ProcessSet* set = nullptr);

// InvalidArgument, naming the collective and the tensor, for a tensor
// without rows (a scalar).
absl::Status NeedsRows(absl::string_view collective, absl::string_view name,
                       const TensorView& input);

// Where the result goes: `output` (null: a view, or, for a CUDA tensor, the
// input itself) holding `capacity` bytes.
void SetOutput(PreparedRequest& prepared, void* output, uint64_t capacity);

// Allreduce: when the host output lies in this client's arena, asks the
// daemon to write the result there (TensorRequest.output_offset), so that
// nothing is copied out of the result segment. After SetOutput.
void SetOutputInArena(const ClientCore& core, PreparedRequest& prepared);

// Broadcast and the rooted collectives: sets the root and the output of a
// prepared request (from PrepareData with `set`) and submits it, or gives
// its staging back when the root is not a rank of `set`. An output of
// `in_arena` bytes that lies in this client's arena is one the daemon
// writes itself (0: never; SetOutputInArena's rule for allreduce).
absl::StatusOr<Client::Handle> SubmitRooted(ClientCore& core,
                                            absl::StatusOr<PreparedRequest> prepared,
                                            const ProcessSet& set, int root_rank, void* output,
                                            uint64_t capacity, uint64_t in_arena);

// A request without data (barrier, join, process-set changes).
PreparedRequest PrepareControl(v1::Collective collective, const char* name, int32_t process_set);

// Frees the staging of requests that will not be submitted.
void Discard(ClientCore& core, std::vector<PreparedRequest>& requests);

}  // namespace collective::internal
