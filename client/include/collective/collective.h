/* libcollective's C ABI, for languages other than C++.
 *
 * Every function that can fail returns 0 on success and otherwise a status
 * code (the gRPC / absl::StatusCode numbering: 3 invalid argument, 4 deadline
 * exceeded, 6 already exists, 9 failed precondition, 14 unavailable, ...);
 * collective_last_error() then returns the message, for the calling thread.
 * Enum values match the C++ API and the wire API and never change. */
#ifndef COLLECTIVE_COLLECTIVE_H_
#define COLLECTIVE_COLLECTIVE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct collective_client collective_client_t;
typedef uint64_t collective_handle_t;

typedef enum {
  COLLECTIVE_UINT8 = 1,
  COLLECTIVE_INT8 = 2,
  COLLECTIVE_UINT16 = 3,
  COLLECTIVE_INT16 = 4,
  COLLECTIVE_INT32 = 5,
  COLLECTIVE_INT64 = 6,
  COLLECTIVE_FLOAT16 = 7,
  COLLECTIVE_BFLOAT16 = 8,
  COLLECTIVE_FLOAT32 = 9,
  COLLECTIVE_FLOAT64 = 10,
  COLLECTIVE_BOOL = 11
} collective_dtype_t;

typedef enum {
  COLLECTIVE_SUM = 1,
  COLLECTIVE_AVERAGE = 2,
  COLLECTIVE_MIN = 3,
  COLLECTIVE_MAX = 4,
  COLLECTIVE_PRODUCT = 5,
  COLLECTIVE_ADASUM = 6
} collective_op_t;

/* A tensor in memory, described but not owned. */
typedef struct {
  const void* data;
  collective_dtype_t dtype;
  const int64_t* shape;
  int ndims;
} collective_tensor_t;

/* The global process set: every rank of the job. */
#define COLLECTIVE_GLOBAL_PROCESS_SET 0

typedef struct {
  const char* socket_path;         /* NULL: $COLLECTIVE_SOCKET or the default socket */
  const char* job_id;              /* NULL: $COLLECTIVE_JOB_ID or "default" */
  int local_rank;                  /* -1: from the launcher's environment */
  int local_size;                  /* -1: from the launcher's environment */
  uint64_t arena_bytes;            /* 0: $COLLECTIVE_ARENA_BYTES or the daemon's default */
  double register_timeout_seconds; /* 0: the library's default */
} collective_options_t;

/* Fills `options` with the defaults above. */
void collective_options_init(collective_options_t* options);

/* The message of the calling thread's last failed call ("" if none). */
const char* collective_last_error(void);

/* Registers and waits until the job has formed. `options` may be NULL. */
int collective_connect(const collective_options_t* options, collective_client_t** client);
/* Leaves the job and frees the client (and its buffers and views). */
void collective_close(collective_client_t* client);
/* A handle over a collective::Client that C++ code owns (`cpp_client` is a
 * collective::Client*), for a plugin that shares its process's connection
 * through the C ABI (the TensorFlow ops share collective._core's). Its
 * collective_close frees the handle and leaves the client connected; the
 * owner must keep the client open until then. */
collective_client_t* collective_borrow(void* cpp_client);

int collective_rank(const collective_client_t* client);
int collective_size(const collective_client_t* client);
int collective_local_rank(const collective_client_t* client);
int collective_local_size(const collective_client_t* client);
int collective_cross_rank(const collective_client_t* client);
int collective_cross_size(const collective_client_t* client);
int collective_is_homogeneous(const collective_client_t* client);

/* A zero-copy buffer in the client's shared-memory arena. */
int collective_alloc(collective_client_t* client, size_t bytes, void** data);
void collective_free(collective_client_t* client, void* data);

/* An arena buffer of its own, for allocators that lend arena memory to a
 * framework (collective.tensorflow's outputs): it never waits (code 8,
 * RESOURCE_EXHAUSTED, at once when no block of `bytes` is free now), and it
 * outlives `client`'s handle, keeping the arena mapped, until
 * collective_buffer_free. `data` is aligned to 64 bytes. */
typedef struct collective_buffer collective_buffer_t;
int collective_buffer_try_alloc(collective_client_t* client, size_t bytes,
                                collective_buffer_t** buffer, void** data);
void collective_buffer_free(collective_buffer_t* buffer);
/* The arena's size, and the bytes of it that no buffer or input in flight
 * holds right now. */
uint64_t collective_arena_bytes(const collective_client_t* client);
uint64_t collective_arena_free_bytes(const collective_client_t* client);
/* 1 if the `bytes` at `data` lie in `client`'s arena (collectives read them
 * where they are), else 0. */
int collective_in_arena(const collective_client_t* client, const void* data, size_t bytes);

/* Starts an allreduce. `output` may be NULL (then collective_wait returns a
 * read-only view) or equal `input` (in place). */
int collective_allreduce_async(collective_client_t* client, const char* name, const void* input,
                               void* output, collective_dtype_t dtype, const int64_t* shape,
                               int ndims, collective_op_t op, double prescale, double postscale,
                               collective_handle_t* handle);
/* Blocking allreduce into `output`. */
int collective_allreduce(collective_client_t* client, const char* name, const void* input,
                         void* output, collective_dtype_t dtype, const int64_t* shape, int ndims,
                         collective_op_t op, double prescale, double postscale);

/* Every Horovod collective (see collective/client.h for the semantics).
 * Outputs may be NULL, for a view returned by collective_wait. Handles come
 * back in `handles` (one per tensor for the grouped forms). */
int collective_allreduce_tensor_async(collective_client_t* client, const char* name,
                                      const collective_tensor_t* input, void* output,
                                      collective_op_t op, double prescale, double postscale,
                                      int32_t process_set, collective_handle_t* handle);
int collective_grouped_allreduce_async(collective_client_t* client, int count,
                                       const char* const* names, const collective_tensor_t* inputs,
                                       void* const* outputs, collective_op_t op, double prescale,
                                       double postscale, int32_t process_set,
                                       collective_handle_t* handles);
int collective_allgather_async(collective_client_t* client, const char* name,
                               const collective_tensor_t* input, int32_t process_set,
                               collective_handle_t* handle);
int collective_grouped_allgather_async(collective_client_t* client, int count,
                                       const char* const* names, const collective_tensor_t* inputs,
                                       int32_t process_set, collective_handle_t* handles);
/* root_rank is counted within the process set. */
int collective_broadcast_async(collective_client_t* client, const char* name,
                               const collective_tensor_t* input, void* output, int root_rank,
                               int32_t process_set, collective_handle_t* handle);
/* splits may be NULL (nsplits 0): the first dimension is split evenly. */
int collective_alltoall_async(collective_client_t* client, const char* name,
                              const collective_tensor_t* input, const int64_t* splits, int nsplits,
                              int32_t process_set, collective_handle_t* handle);
int collective_reducescatter_async(collective_client_t* client, const char* name,
                                   const collective_tensor_t* input, void* output,
                                   collective_op_t op, double prescale, double postscale,
                                   int32_t process_set, collective_handle_t* handle);
int collective_grouped_reducescatter_async(collective_client_t* client, int count,
                                           const char* const* names,
                                           const collective_tensor_t* inputs, void* const* outputs,
                                           collective_op_t op, double prescale, double postscale,
                                           int32_t process_set, collective_handle_t* handles);
/* CUDA tensors. With COLLECTIVE_DEVICE_CUDA, `input->data` and `output` are
 * CUDA device memory of the client's device (the one current when it first
 * passed a CUDA tensor) and `stream` the cudaStream_t that produces the input
 * and reads the result (NULL: the default stream); collective_wait returns
 * once `stream` waits for the result, without blocking the host on the GPU.
 * Allocations are registered with the daemon at first use, or ahead of time
 * with collective_register_device_memory (unregister before freeing them).
 * An output of NULL means in place for allreduce and broadcast; the others
 * need one, `output_bytes` large enough for this rank's rows. With
 * COLLECTIVE_DEVICE_CPU these are the host collectives with an output. An
 * alltoall's handle is kept by collective_wait, for
 * collective_received_splits, until collective_release. */
typedef enum { COLLECTIVE_DEVICE_CPU = 0, COLLECTIVE_DEVICE_CUDA = 1 } collective_device_t;

int collective_register_device_memory(collective_client_t* client, const void* device_pointer);
int collective_unregister_device_memory(collective_client_t* client, const void* device_pointer);
int collective_allreduce_device_async(collective_client_t* client, const char* name,
                                      const collective_tensor_t* input, void* output,
                                      collective_op_t op, double prescale, double postscale,
                                      int32_t process_set, collective_device_t device, void* stream,
                                      collective_handle_t* handle);
int collective_broadcast_device_async(collective_client_t* client, const char* name,
                                      const collective_tensor_t* input, void* output, int root_rank,
                                      int32_t process_set, collective_device_t device, void* stream,
                                      collective_handle_t* handle);
int collective_allgather_device_async(collective_client_t* client, const char* name,
                                      const collective_tensor_t* input, void* output,
                                      size_t output_bytes, int32_t process_set,
                                      collective_device_t device, void* stream,
                                      collective_handle_t* handle);
int collective_alltoall_device_async(collective_client_t* client, const char* name,
                                     const collective_tensor_t* input, const int64_t* splits,
                                     int nsplits, void* output, size_t output_bytes,
                                     int32_t process_set, collective_device_t device, void* stream,
                                     collective_handle_t* handle);
int collective_reducescatter_device_async(collective_client_t* client, const char* name,
                                          const collective_tensor_t* input, void* output,
                                          collective_op_t op, double prescale, double postscale,
                                          int32_t process_set, collective_device_t device,
                                          void* stream, collective_handle_t* handle);

/* Rooted collectives (see collective/client.h): root_rank is counted within
 * the process set, and a rank that receives nothing gets an empty result.
 * `output` may be NULL, for a view returned by collective_wait; reduce's
 * holds the input's bytes (it may be the input), gather's and scatter's
 * `output_bytes`. Host tensors only. */
int collective_reduce_async(collective_client_t* client, const char* name,
                            const collective_tensor_t* input, void* output, collective_op_t op,
                            double prescale, double postscale, int root_rank, int32_t process_set,
                            collective_handle_t* handle);
int collective_gather_async(collective_client_t* client, const char* name,
                            const collective_tensor_t* input, int root_rank, int32_t process_set,
                            void* output, size_t output_bytes, collective_handle_t* handle);
int collective_scatter_async(collective_client_t* client, const char* name,
                             const collective_tensor_t* input, int64_t receive_rows, int root_rank,
                             int32_t process_set, void* output, size_t output_bytes,
                             collective_handle_t* handle);
/* Point-to-point messages (see Client::SendAsync and Client::RecvAsync):
 * `dest` and `source` are ranks within the process set, `tag` >= 0; `like`
 * gives the dtype and shape received (its data is not read). A receive
 * with a NULL output is a view returned by collective_wait (release it);
 * a send's result is empty. */
int collective_send_async(collective_client_t* client, const collective_tensor_t* input, int dest,
                          int tag, int32_t process_set, collective_handle_t* handle);
int collective_recv_async(collective_client_t* client, const collective_tensor_t* like, int source,
                          int tag, int32_t process_set, void* output, size_t output_bytes,
                          collective_handle_t* handle);

int collective_barrier(collective_client_t* client, int32_t process_set);
/* *last_rank: the last rank to join, counted within the set. */
int collective_join(collective_client_t* client, int32_t process_set, int* last_rank);

/* Process sets: adding and removing are collectives of the global set. */
int collective_add_process_set(collective_client_t* client, const int* ranks, int nranks,
                               int32_t* id);
int collective_remove_process_set(collective_client_t* client, int32_t id);
int collective_process_set_rank(const collective_client_t* client, int32_t id, int* rank);
int collective_process_set_size(const collective_client_t* client, int32_t id, int* size);
int collective_process_set_included(const collective_client_t* client, int32_t id, int* included);

/* The timeline of the client's job alone, written with the caller's own file
 * permissions. */
int collective_start_timeline(collective_client_t* client, const char* path, int mark_cycles);
int collective_stop_timeline(collective_client_t* client);

/* After collective_wait of a view (no output), until collective_release: the
 * result's shape (allgather and alltoall learn their first dimension here)
 * and, for alltoall, the rows received from each rank. Up to `capacity`
 * values are written; *count says how many there are. */
int collective_result_shape(collective_client_t* client, collective_handle_t handle, int64_t* shape,
                            int capacity, int* count);
int collective_received_splits(collective_client_t* client, collective_handle_t handle,
                               int64_t* splits, int capacity, int* count);

/* 1 when collective_wait would not block, else 0. */
int collective_poll(collective_client_t* client, collective_handle_t handle);
/* Waits (timeout_seconds < 0: forever). When the request had no output
 * buffer, *view and *bytes describe the result until collective_release
 * (call it once per such request); either pointer may be NULL. */
int collective_wait(collective_client_t* client, collective_handle_t handle, double timeout_seconds,
                    const void** view, size_t* bytes);
/* Ends a view returned by collective_wait. */
void collective_release(collective_client_t* client, collective_handle_t handle);

#ifdef __cplusplus
}
#endif

#endif /* COLLECTIVE_COLLECTIVE_H_ */
