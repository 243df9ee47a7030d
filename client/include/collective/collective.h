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

/* 1 when collective_wait would not block, else 0. */
int collective_poll(collective_client_t* client, collective_handle_t handle);
/* Waits (timeout_seconds < 0: forever). When the request had no output
 * buffer, *view and *bytes describe the result until collective_release;
 * either pointer may be NULL. */
int collective_wait(collective_client_t* client, collective_handle_t handle, double timeout_seconds,
                    const void** view, size_t* bytes);
/* Ends a view returned by collective_wait. */
void collective_release(collective_client_t* client, collective_handle_t handle);

#ifdef __cplusplus
}
#endif

#endif /* COLLECTIVE_COLLECTIVE_H_ */
