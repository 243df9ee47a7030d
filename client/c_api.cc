// The C ABI over collective::Client. Buffers and result views live in the
// handle, keyed by pointer and request handle, so that C callers deal only in
// plain pointers and integers.
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "collective/client.h"
#include "collective/collective.h"

struct collective_client {
  std::unique_ptr<collective::Client> client;
  std::mutex mutex;
  absl::flat_hash_map<void*, collective::Buffer> buffers;
  absl::flat_hash_map<collective_handle_t, collective::Result> views;
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

collective::AllreduceOptions Options(collective_op_t op, double prescale, double postscale) {
  return {static_cast<collective::ReduceOp>(op), prescale, postscale};
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

void collective_close(collective_client_t* client) {
  if (client == nullptr) return;
  client->views.clear();
  client->buffers.clear();
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

int collective_allreduce_async(collective_client_t* client, const char* name, const void* input,
                               void* output, collective_dtype_t dtype, const int64_t* shape,
                               int ndims, collective_op_t op, double prescale, double postscale,
                               collective_handle_t* handle) {
  if (name == nullptr) return Fail(absl::InvalidArgumentError("the tensor name is NULL"));
  auto started = client->client->AllreduceAsync(name, View(input, dtype, shape, ndims), output,
                                                Options(op, prescale, postscale));
  if (!started.ok()) return Fail(started.status());
  *handle = *started;
  return 0;
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
  client->views.insert_or_assign(handle, std::move(*result));
  return 0;
}

void collective_release(collective_client_t* client, collective_handle_t handle) {
  std::lock_guard lock(client->mutex);
  client->views.erase(handle);
}

}  // extern "C"
