// The C ABI over collective::Client. Buffers and result views live in the
// handle, keyed by pointer and request handle, so that C callers deal only in
// plain pointers and integers.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "collective/client.h"
#include "collective/collective.h"

// collective_buffer_try_alloc's: owns its block and, through it, the arena's
// mapping.
struct collective_buffer {
  collective::Buffer buffer;
};

struct collective_client {
  std::unique_ptr<collective::Client> client;
  std::mutex mutex;
  absl::flat_hash_map<void*, collective::Buffer> buffers;
  // Requests started without an output: collective_wait keeps their Result
  // (a view) until collective_release.
  absl::flat_hash_set<collective_handle_t> view_handles;
  absl::flat_hash_map<collective_handle_t, collective::Result> views;
  // collective_borrow: `client` belongs to C++ code elsewhere, and closing
  // this handle must not close it.
  bool borrowed = false;
};

namespace {

thread_local std::string last_error;

int Fail(const absl::Status& status) {
  last_error = std::string(status.message());
  return static_cast<int>(status.code());
}

collective::TensorView View(const void* data, collective_dtype_t dtype, const int64_t* shape,
                            int ndims) {
  collective::TensorView view{data, static_cast<collective::DataType>(dtype), {}};
  if (shape != nullptr && ndims > 0) view.shape.assign(shape, shape + ndims);
  return view;
}

collective::AllreduceOptions Options(collective_op_t op, double prescale, double postscale,
                                     int32_t process_set = 0) {
  return {static_cast<collective::ReduceOp>(op), prescale, postscale, process_set};
}

collective::TensorView View(const collective_tensor_t* tensor) {
  return View(tensor->data, tensor->dtype, tensor->shape, tensor->ndims);
}

collective::TensorView View(const collective_tensor_t* tensor, collective_device_t device,
                            void* stream) {
  collective::TensorView view = View(tensor);
  view.device = static_cast<collective::Device>(device);
  view.cuda_stream = stream;
  return view;
}

absl::Status CheckArguments(const char* name, const collective_tensor_t* input) {
  if (name == nullptr) return absl::InvalidArgumentError("the tensor name is NULL");
  if (input == nullptr) return absl::InvalidArgumentError("the input tensor is NULL");
  return absl::OkStatus();
}

// Records the handles of a successful start; those without an output are
// views that collective_wait keeps.
int Started(collective_client_t* client,
            const absl::StatusOr<std::vector<collective::Client::Handle>>& started,
            const std::vector<bool>& views, collective_handle_t* handles) {
  if (!started.ok()) return Fail(started.status());
  std::lock_guard lock(client->mutex);
  for (size_t i = 0; i < started->size(); ++i) {
    handles[i] = (*started)[i];
    if (views[i]) client->view_handles.insert(handles[i]);
  }
  return 0;
}

int Started(collective_client_t* client, const absl::StatusOr<collective::Client::Handle>& started,
            bool view, collective_handle_t* handle) {
  if (!started.ok()) return Fail(started.status());
  return Started(client, std::vector<collective::Client::Handle>{*started}, {view}, handle);
}

absl::Status CheckGroup(int count, const char* const* names) {
  if (count < 1) return absl::InvalidArgumentError("a group needs at least one tensor");
  for (int i = 0; i < count; ++i) {
    if (names[i] == nullptr) return absl::InvalidArgumentError("a tensor name is NULL");
  }
  return absl::OkStatus();
}

// The C arrays of a grouped call (checked with CheckGroup), as the C++ API
// takes them; `outputs` may be NULL for a call without outputs.
struct Group {
  std::vector<std::string> names;
  std::vector<collective::TensorView> inputs;
  std::vector<void*> outputs;
  std::vector<bool> is_view;  // the result is viewed, not copied out
};

Group MakeGroup(int count, const char* const* names, const collective_tensor_t* inputs,
                void* const* outputs) {
  Group group;
  group.names.assign(names, names + count);
  for (int i = 0; i < count; ++i) {
    group.inputs.push_back(View(&inputs[i]));
    group.outputs.push_back(outputs != nullptr ? outputs[i] : nullptr);
    group.is_view.push_back(group.outputs.back() == nullptr);
  }
  return group;
}

int Copy(const std::vector<int64_t>& values, int64_t* out, int capacity, int* count) {
  *count = static_cast<int>(values.size());
  for (int i = 0; i < std::min(capacity, *count); ++i) out[i] = values[i];
  return 0;
}

}  // namespace

extern "C" {

void collective_options_init(collective_options_t* options) {
  *options = collective_options_t{nullptr, nullptr, -1, -1, 0, 0.0};
}

const char* collective_last_error(void) { return last_error.c_str(); }

int collective_connect(const collective_options_t* options, collective_client_t** client) {
  collective::ClientOptions resolved;
  if (options != nullptr) {
    if (options->socket_path != nullptr) resolved.socket_path = options->socket_path;
    if (options->job_id != nullptr) resolved.job_id = options->job_id;
    resolved.local_rank = options->local_rank;
    resolved.local_size = options->local_size;
    resolved.arena_bytes = options->arena_bytes;
    if (options->register_timeout_seconds > 0) {
      resolved.register_timeout = absl::Seconds(options->register_timeout_seconds);
    }
  }
  auto connected = collective::Client::Connect(resolved);
  if (!connected.ok()) return Fail(connected.status());
  *client = new collective_client{std::move(*connected), {}, {}, {}};
  return 0;
}

collective_client_t* collective_borrow(void* cpp_client) {
  auto* handle = new collective_client{
      std::unique_ptr<collective::Client>(static_cast<collective::Client*>(cpp_client)),
      {},
      {},
      {}};
  handle->borrowed = true;
  return handle;
}

void collective_close(collective_client_t* client) {
  if (client == nullptr) return;
  client->views.clear();
  client->buffers.clear();
  if (client->borrowed) static_cast<void>(client->client.release());
  delete client;
}

int collective_rank(const collective_client_t* client) { return client->client->rank(); }
int collective_size(const collective_client_t* client) { return client->client->size(); }
int collective_local_rank(const collective_client_t* client) {
  return client->client->local_rank();
}
int collective_local_size(const collective_client_t* client) {
  return client->client->local_size();
}
int collective_cross_rank(const collective_client_t* client) {
  return client->client->cross_rank();
}
int collective_cross_size(const collective_client_t* client) {
  return client->client->cross_size();
}
int collective_is_homogeneous(const collective_client_t* client) {
  return client->client->is_homogeneous() ? 1 : 0;
}

int collective_alloc(collective_client_t* client, size_t bytes, void** data) {
  auto buffer = client->client->Allocate(bytes);
  if (!buffer.ok()) return Fail(buffer.status());
  *data = buffer->data();
  std::lock_guard lock(client->mutex);
  client->buffers.emplace(*data, std::move(*buffer));
  return 0;
}

void collective_free(collective_client_t* client, void* data) {
  std::lock_guard lock(client->mutex);
  client->buffers.erase(data);
}

int collective_buffer_try_alloc(collective_client_t* client, size_t bytes,
                                collective_buffer_t** buffer, void** data) {
  auto allocated = client->client->TryAllocate(bytes);
  if (!allocated.ok()) return Fail(allocated.status());
  *data = allocated->data();
  *buffer = new collective_buffer{std::move(*allocated)};
  return 0;
}

void collective_buffer_free(collective_buffer_t* buffer) { delete buffer; }

uint64_t collective_arena_bytes(const collective_client_t* client) {
  return client->client->arena_bytes();
}

uint64_t collective_arena_free_bytes(const collective_client_t* client) {
  return client->client->arena_free_bytes();
}

int collective_in_arena(const collective_client_t* client, const void* data, size_t bytes) {
  return client->client->InArena(data, bytes) ? 1 : 0;
}

int collective_allreduce_async(collective_client_t* client, const char* name, const void* input,
                               void* output, collective_dtype_t dtype, const int64_t* shape,
                               int ndims, collective_op_t op, double prescale, double postscale,
                               collective_handle_t* handle) {
  if (name == nullptr) return Fail(absl::InvalidArgumentError("the tensor name is NULL"));
  return Started(client,
                 client->client->AllreduceAsync(name, View(input, dtype, shape, ndims), output,
                                                Options(op, prescale, postscale)),
                 output == nullptr, handle);
}

int collective_allreduce(collective_client_t* client, const char* name, const void* input,
                         void* output, collective_dtype_t dtype, const int64_t* shape, int ndims,
                         collective_op_t op, double prescale, double postscale) {
  if (name == nullptr) return Fail(absl::InvalidArgumentError("the tensor name is NULL"));
  if (output == nullptr) return Fail(absl::InvalidArgumentError("the output buffer is NULL"));
  absl::Status status = client->client->Allreduce(name, View(input, dtype, shape, ndims), output,
                                                  Options(op, prescale, postscale));
  return status.ok() ? 0 : Fail(status);
}

int collective_poll(collective_client_t* client, collective_handle_t handle) {
  return client->client->Poll(handle) ? 1 : 0;
}

int collective_wait(collective_client_t* client, collective_handle_t handle, double timeout_seconds,
                    const void** view, size_t* bytes) {
  const absl::Duration timeout =
      timeout_seconds < 0 ? absl::InfiniteDuration() : absl::Seconds(timeout_seconds);
  auto result = client->client->Wait(handle, timeout);
  if (!result.ok()) return Fail(result.status());
  if (view != nullptr) *view = result->data();
  if (bytes != nullptr) *bytes = result->bytes();
  std::lock_guard lock(client->mutex);
  if (client->view_handles.erase(handle) > 0) {
    client->views.insert_or_assign(handle, std::move(*result));
  }
  return 0;
}

void collective_release(collective_client_t* client, collective_handle_t handle) {
  std::lock_guard lock(client->mutex);
  client->views.erase(handle);
}

int collective_allreduce_tensor_async(collective_client_t* client, const char* name,
                                      const collective_tensor_t* input, void* output,
                                      collective_op_t op, double prescale, double postscale,
                                      int32_t process_set, collective_handle_t* handle) {
  if (name == nullptr) return Fail(absl::InvalidArgumentError("the tensor name is NULL"));
  return Started(client,
                 client->client->AllreduceAsync(name, View(input), output,
                                                Options(op, prescale, postscale, process_set)),
                 output == nullptr, handle);
}

int collective_grouped_allreduce_async(collective_client_t* client, int count,
                                       const char* const* names, const collective_tensor_t* inputs,
                                       void* const* outputs, collective_op_t op, double prescale,
                                       double postscale, int32_t process_set,
                                       collective_handle_t* handles) {
  if (absl::Status checked = CheckGroup(count, names); !checked.ok()) return Fail(checked);
  const Group group = MakeGroup(count, names, inputs, outputs);
  return Started(
      client,
      client->client->GroupedAllreduceAsync(group.names, group.inputs, group.outputs,
                                            Options(op, prescale, postscale, process_set)),
      group.is_view, handles);
}

int collective_allgather_async(collective_client_t* client, const char* name,
                               const collective_tensor_t* input, int32_t process_set,
                               collective_handle_t* handle) {
  if (name == nullptr) return Fail(absl::InvalidArgumentError("the tensor name is NULL"));
  return Started(client, client->client->AllgatherAsync(name, View(input), process_set), true,
                 handle);
}

int collective_grouped_allgather_async(collective_client_t* client, int count,
                                       const char* const* names, const collective_tensor_t* inputs,
                                       int32_t process_set, collective_handle_t* handles) {
  if (absl::Status checked = CheckGroup(count, names); !checked.ok()) return Fail(checked);
  const Group group = MakeGroup(count, names, inputs, nullptr);
  return Started(client,
                 client->client->GroupedAllgatherAsync(group.names, group.inputs, process_set),
                 group.is_view, handles);
}

int collective_broadcast_async(collective_client_t* client, const char* name,
                               const collective_tensor_t* input, void* output, int root_rank,
                               int32_t process_set, collective_handle_t* handle) {
  if (name == nullptr) return Fail(absl::InvalidArgumentError("the tensor name is NULL"));
  return Started(client,
                 client->client->BroadcastAsync(name, View(input), output, root_rank, process_set),
                 output == nullptr, handle);
}

int collective_alltoall_async(collective_client_t* client, const char* name,
                              const collective_tensor_t* input, const int64_t* splits, int nsplits,
                              int32_t process_set, collective_handle_t* handle) {
  if (name == nullptr) return Fail(absl::InvalidArgumentError("the tensor name is NULL"));
  std::vector<int64_t> split_list;
  if (splits != nullptr && nsplits > 0) split_list.assign(splits, splits + nsplits);
  return Started(client, client->client->AlltoallAsync(name, View(input), split_list, process_set),
                 true, handle);
}

int collective_reducescatter_async(collective_client_t* client, const char* name,
                                   const collective_tensor_t* input, void* output,
                                   collective_op_t op, double prescale, double postscale,
                                   int32_t process_set, collective_handle_t* handle) {
  if (name == nullptr) return Fail(absl::InvalidArgumentError("the tensor name is NULL"));
  return Started(client,
                 client->client->ReducescatterAsync(name, View(input), output,
                                                    Options(op, prescale, postscale, process_set)),
                 output == nullptr, handle);
}

int collective_grouped_reducescatter_async(collective_client_t* client, int count,
                                           const char* const* names,
                                           const collective_tensor_t* inputs, void* const* outputs,
                                           collective_op_t op, double prescale, double postscale,
                                           int32_t process_set, collective_handle_t* handles) {
  if (absl::Status checked = CheckGroup(count, names); !checked.ok()) return Fail(checked);
  const Group group = MakeGroup(count, names, inputs, outputs);
  return Started(
      client,
      client->client->GroupedReducescatterAsync(group.names, group.inputs, group.outputs,
                                                Options(op, prescale, postscale, process_set)),
      group.is_view, handles);
}

int collective_register_device_memory(collective_client_t* client, const void* device_pointer) {
  const absl::Status status = client->client->RegisterDeviceMemory(device_pointer);
  return status.ok() ? 0 : Fail(status);
}

int collective_unregister_device_memory(collective_client_t* client, const void* device_pointer) {
  const absl::Status status = client->client->UnregisterDeviceMemory(device_pointer);
  return status.ok() ? 0 : Fail(status);
}

int collective_allreduce_device_async(collective_client_t* client, const char* name,
                                      const collective_tensor_t* input, void* output,
                                      collective_op_t op, double prescale, double postscale,
                                      int32_t process_set, collective_device_t device, void* stream,
                                      collective_handle_t* handle) {
  if (absl::Status checked = CheckArguments(name, input); !checked.ok()) return Fail(checked);
  const bool view = device == COLLECTIVE_DEVICE_CPU && output == nullptr;
  return Started(client,
                 client->client->AllreduceAsync(name, View(input, device, stream), output,
                                                Options(op, prescale, postscale, process_set)),
                 view, handle);
}

int collective_broadcast_device_async(collective_client_t* client, const char* name,
                                      const collective_tensor_t* input, void* output, int root_rank,
                                      int32_t process_set, collective_device_t device, void* stream,
                                      collective_handle_t* handle) {
  if (absl::Status checked = CheckArguments(name, input); !checked.ok()) return Fail(checked);
  const bool view = device == COLLECTIVE_DEVICE_CPU && output == nullptr;
  return Started(client,
                 client->client->BroadcastAsync(name, View(input, device, stream), output,
                                                root_rank, process_set),
                 view, handle);
}

int collective_allgather_device_async(collective_client_t* client, const char* name,
                                      const collective_tensor_t* input, void* output,
                                      size_t output_bytes, int32_t process_set,
                                      collective_device_t device, void* stream,
                                      collective_handle_t* handle) {
  if (absl::Status checked = CheckArguments(name, input); !checked.ok()) return Fail(checked);
  return Started(client,
                 client->client->AllgatherAsync(name, View(input, device, stream), output,
                                                output_bytes, process_set),
                 false, handle);
}

int collective_alltoall_device_async(collective_client_t* client, const char* name,
                                     const collective_tensor_t* input, const int64_t* splits,
                                     int nsplits, void* output, size_t output_bytes,
                                     int32_t process_set, collective_device_t device, void* stream,
                                     collective_handle_t* handle) {
  if (absl::Status checked = CheckArguments(name, input); !checked.ok()) return Fail(checked);
  std::vector<int64_t> split_list;
  if (splits != nullptr && nsplits > 0) split_list.assign(splits, splits + nsplits);
  // Kept, so that collective_received_splits can read the splits.
  return Started(client,
                 client->client->AlltoallAsync(name, View(input, device, stream), split_list,
                                               output, output_bytes, process_set),
                 true, handle);
}

int collective_reducescatter_device_async(collective_client_t* client, const char* name,
                                          const collective_tensor_t* input, void* output,
                                          collective_op_t op, double prescale, double postscale,
                                          int32_t process_set, collective_device_t device,
                                          void* stream, collective_handle_t* handle) {
  if (absl::Status checked = CheckArguments(name, input); !checked.ok()) return Fail(checked);
  const bool view = device == COLLECTIVE_DEVICE_CPU && output == nullptr;
  return Started(client,
                 client->client->ReducescatterAsync(name, View(input, device, stream), output,
                                                    Options(op, prescale, postscale, process_set)),
                 view, handle);
}

int collective_send_async(collective_client_t* client, const collective_tensor_t* input, int dest,
                          int tag, int32_t process_set, collective_handle_t* handle) {
  return Started(client, client->client->SendAsync(View(input), dest, tag, process_set), false,
                 handle);
}

int collective_recv_async(collective_client_t* client, const collective_tensor_t* like, int source,
                          int tag, int32_t process_set, void* output, size_t output_bytes,
                          collective_handle_t* handle) {
  return Started(
      client, client->client->RecvAsync(View(like), source, tag, process_set, output, output_bytes),
      output == nullptr, handle);
}

int collective_barrier(collective_client_t* client, int32_t process_set) {
  const absl::Status status = client->client->Barrier(process_set);
  return status.ok() ? 0 : Fail(status);
}

int collective_join(collective_client_t* client, int32_t process_set, int* last_rank) {
  auto joined = client->client->Join(process_set);
  if (!joined.ok()) return Fail(joined.status());
  if (last_rank != nullptr) *last_rank = *joined;
  return 0;
}

int collective_add_process_set(collective_client_t* client, const int* ranks, int nranks,
                               int32_t* id) {
  if (ranks == nullptr && nranks > 0) return Fail(absl::InvalidArgumentError("ranks is NULL"));
  auto added = client->client->AddProcessSet(std::vector<int>(ranks, ranks + std::max(nranks, 0)));
  if (!added.ok()) return Fail(added.status());
  if (id != nullptr) *id = added->id;
  return 0;
}

int collective_remove_process_set(collective_client_t* client, int32_t id) {
  const absl::Status status = client->client->RemoveProcessSet(id);
  return status.ok() ? 0 : Fail(status);
}

int collective_process_set_rank(const collective_client_t* client, int32_t id, int* rank) {
  auto value = client->client->ProcessSetRank(id);
  if (!value.ok()) return Fail(value.status());
  *rank = *value;
  return 0;
}

int collective_process_set_size(const collective_client_t* client, int32_t id, int* size) {
  auto value = client->client->ProcessSetSize(id);
  if (!value.ok()) return Fail(value.status());
  *size = *value;
  return 0;
}

int collective_process_set_included(const collective_client_t* client, int32_t id, int* included) {
  auto value = client->client->ProcessSetIncluded(id);
  if (!value.ok()) return Fail(value.status());
  *included = *value ? 1 : 0;
  return 0;
}

int collective_start_timeline(collective_client_t* client, const char* path, int mark_cycles) {
  if (path == nullptr) return Fail(absl::InvalidArgumentError("the timeline path is NULL"));
  const absl::Status status = client->client->StartTimeline(path, mark_cycles != 0);
  return status.ok() ? 0 : Fail(status);
}

int collective_stop_timeline(collective_client_t* client) {
  const absl::Status status = client->client->StopTimeline();
  return status.ok() ? 0 : Fail(status);
}

int collective_result_shape(collective_client_t* client, collective_handle_t handle, int64_t* shape,
                            int capacity, int* count) {
  std::lock_guard lock(client->mutex);
  const auto it = client->views.find(handle);
  if (it == client->views.end()) {
    return Fail(absl::NotFoundError("no waited-for view with this handle"));
  }
  return Copy(it->second.shape(), shape, capacity, count);
}

int collective_received_splits(collective_client_t* client, collective_handle_t handle,
                               int64_t* splits, int capacity, int* count) {
  std::lock_guard lock(client->mutex);
  const auto it = client->views.find(handle);
  if (it == client->views.end()) {
    return Fail(absl::NotFoundError("no waited-for view with this handle"));
  }
  return Copy(it->second.received_splits(), splits, capacity, count);
}

int collective_reduce_async(collective_client_t* client, const char* name,
                            const collective_tensor_t* input, void* output, collective_op_t op,
                            double prescale, double postscale, int root_rank, int32_t process_set,
                            collective_handle_t* handle) {
  if (absl::Status checked = CheckArguments(name, input); !checked.ok()) return Fail(checked);
  return Started(client,
                 client->client->ReduceAsync(name, View(input), output, root_rank,
                                             Options(op, prescale, postscale, process_set)),
                 output == nullptr, handle);
}

int collective_gather_async(collective_client_t* client, const char* name,
                            const collective_tensor_t* input, int root_rank, int32_t process_set,
                            void* output, size_t output_bytes, collective_handle_t* handle) {
  if (absl::Status checked = CheckArguments(name, input); !checked.ok()) return Fail(checked);
  return Started(
      client,
      client->client->GatherAsync(name, View(input), root_rank, process_set, output, output_bytes),
      output == nullptr, handle);
}

int collective_scatter_async(collective_client_t* client, const char* name,
                             const collective_tensor_t* input, int64_t receive_rows, int root_rank,
                             int32_t process_set, void* output, size_t output_bytes,
                             collective_handle_t* handle) {
  if (absl::Status checked = CheckArguments(name, input); !checked.ok()) return Fail(checked);
  return Started(client,
                 client->client->ScatterAsync(name, View(input), receive_rows, root_rank,
                                              process_set, output, output_bytes),
                 output == nullptr, handle);
}

}  // extern "C"
