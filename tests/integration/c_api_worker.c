/* collective-c-api-worker: one rank of a job, written in C against
 * libcollective's C ABI only (collective/collective.h), to prove that the
 * header compiles as C and that the ABI works end to end. Connects from the
 * launcher's environment (COLLECTIVE_SOCKET, LOCAL_RANK, LOCAL_SIZE), then:
 * a float32 average from private memory into private memory, an int32 sum
 * from an arena buffer (collective_alloc) read back through a view, one into
 * an owned buffer (collective_buffer_try_alloc) read after the handle closed, the other
 * collectives (allgather with a shape learned from the result, broadcast,
 * alltoall with received splits, reducescatter, reduce, gather, scatter,
 * grouped allreduce, barrier, a process set, join), and refused calls whose
 * status code and collective_last_error are checked.
 * Prints "ok rank R of N" and exits 0, or says on stderr what went wrong and
 * exits 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/collective.h"

enum { kCount = 1000, kInvalidArgument = 3 };

static int failures = 0;

static void Fail(const char* what) {
  fprintf(stderr, "c-api-worker: %s (last error: %s)\n", what, collective_last_error());
  ++failures;
}

/* Element i of rank r's input: distinct per rank and element, exact in
 * float32. */
static int32_t Value(int rank, int i) { return (rank + 1) * 1000 + i; }

static int32_t SumOverRanks(int size, int i) {
  int32_t sum = 0;
  for (int rank = 0; rank < size; ++rank) sum += Value(rank, i);
  return sum;
}

static void AverageFloat32(collective_client_t* client, int rank, int size) {
  float input[kCount];
  float output[kCount];
  const int64_t shape[1] = {kCount};
  for (int i = 0; i < kCount; ++i) input[i] = (float)Value(rank, i);
  if (collective_allreduce(client, "c.float32.average", input, output, COLLECTIVE_FLOAT32, shape, 1,
                           COLLECTIVE_AVERAGE, 1.0, 1.0) != 0) {
    Fail("float32 average");
    return;
  }
  for (int i = 0; i < kCount; ++i) {
    const float expected = (float)SumOverRanks(size, i) / (float)size;
    /* Dividing or multiplying by 1/size may differ in the last bit. */
    const float difference = output[i] > expected ? output[i] - expected : expected - output[i];
    if (difference > expected * 1e-6f) {
      fprintf(stderr, "c-api-worker: float32 average [%d] = %g, expected %g\n", i, output[i],
              expected);
      ++failures;
      return;
    }
  }
}

static void SumInt32InArena(collective_client_t* client, int rank, int size) {
  void* buffer = NULL;
  const int64_t shape[2] = {10, kCount / 10};
  collective_handle_t handle = 0;
  const void* view = NULL;
  size_t bytes = 0;
  if (collective_alloc(client, kCount * sizeof(int32_t), &buffer) != 0) {
    Fail("collective_alloc");
    return;
  }
  int32_t* input = (int32_t*)buffer;
  for (int i = 0; i < kCount; ++i) input[i] = Value(rank, i);
  /* No output buffer: collective_wait hands out a view of the result. */
  if (collective_allreduce_async(client, "c.int32.sum", input, NULL, COLLECTIVE_INT32, shape, 2,
                                 COLLECTIVE_SUM, 1.0, 1.0, &handle) != 0) {
    Fail("int32 sum: submit");
  } else if (collective_wait(client, handle, 30.0, &view, &bytes) != 0) {
    Fail("int32 sum: wait");
  } else if (bytes != kCount * sizeof(int32_t) || view == NULL) {
    fprintf(stderr, "c-api-worker: int32 sum: view of %zu bytes\n", bytes);
    ++failures;
  } else {
    const int32_t* result = (const int32_t*)view;
    for (int i = 0; i < kCount; ++i) {
      if (result[i] != SumOverRanks(size, i)) {
        fprintf(stderr, "c-api-worker: int32 sum [%d] = %d, expected %d\n", i, result[i],
                SumOverRanks(size, i));
        ++failures;
        break;
      }
    }
    collective_release(client, handle);
  }
  collective_free(client, buffer);
}

/* An owned buffer (collective_buffer_try_alloc) as an allreduce's output; it
 * is aligned, counted out of the free bytes, and refused at once when it
 * cannot fit. Returned (with its data) for the caller to free after
 * collective_close: it keeps the arena mapped. */
static collective_buffer_t* OwnedBufferAsOutput(collective_client_t* client, int rank,
                                                int32_t** data) {
  collective_buffer_t* buffer = NULL;
  void* memory = NULL;
  const int64_t shape[1] = {kCount};
  int32_t input[kCount];
  const uint64_t free_before = collective_arena_free_bytes(client);
  if (collective_buffer_try_alloc(client, kCount * sizeof(int32_t), &buffer, &memory) != 0) {
    Fail("collective_buffer_try_alloc");
    return NULL;
  }
  if ((uintptr_t)memory % 64 != 0) Fail("an owned buffer is not aligned to 64 bytes");
  if (!collective_in_arena(client, memory, kCount * sizeof(int32_t))) {
    Fail("an owned buffer does not lie in the arena");
  }
  if (collective_in_arena(client, input, sizeof input)) Fail("a stack array lies in the arena");
  if (collective_arena_free_bytes(client) + kCount * sizeof(int32_t) > free_before) {
    Fail("an owned buffer is not counted out of the arena's free bytes");
  }
  collective_buffer_t* too_big = NULL;
  void* unused = NULL;
  if (collective_buffer_try_alloc(client, (size_t)free_before * 2, &too_big, &unused) != 8) {
    Fail("a buffer larger than the free bytes was not refused with RESOURCE_EXHAUSTED");
  }
  for (int i = 0; i < kCount; ++i) input[i] = Value(rank, i);
  if (collective_allreduce(client, "c.int32.owned", input, memory, COLLECTIVE_INT32, shape, 1,
                           COLLECTIVE_SUM, 1.0, 1.0) != 0) {
    Fail("int32 sum into an owned buffer");
  }
  *data = (int32_t*)memory;
  return buffer;
}

/* Rank r contributes r + 1 rows of two int64 values (r, row). */
static void Allgather(collective_client_t* client, int rank, int size) {
  int64_t input[2 * 16];
  const int64_t shape[2] = {rank + 1, 2};
  const collective_tensor_t tensor = {input, COLLECTIVE_INT64, shape, 2};
  collective_handle_t handle = 0;
  const void* view = NULL;
  size_t bytes = 0;
  int64_t result_shape[2] = {0, 0};
  int ndims = 0;
  for (int row = 0; row <= rank; ++row) {
    input[2 * row] = rank;
    input[2 * row + 1] = row;
  }
  if (collective_allgather_async(client, "c.allgather", &tensor, COLLECTIVE_GLOBAL_PROCESS_SET,
                                 &handle) != 0 ||
      collective_wait(client, handle, 30.0, &view, &bytes) != 0 ||
      collective_result_shape(client, handle, result_shape, 2, &ndims) != 0) {
    Fail("allgather");
    return;
  }
  const int64_t* rows = (const int64_t*)view;
  int64_t expected_rows = 0;
  for (int sender = 0; sender < size; ++sender) {
    for (int row = 0; row <= sender; ++row, ++expected_rows) {
      if (rows[2 * expected_rows] != sender || rows[2 * expected_rows + 1] != row) {
        Fail("allgather: wrong row");
        collective_release(client, handle);
        return;
      }
    }
  }
  if (ndims != 2 || result_shape[0] != expected_rows || result_shape[1] != 2 ||
      bytes != (size_t)expected_rows * 2 * sizeof(int64_t)) {
    Fail("allgather: wrong result shape");
  }
  collective_release(client, handle);
}

/* Broadcast from the last rank, in place; then alltoall where rank r sends
 * j rows to rank j; then a reducescatter of 5 rows. */
static void OtherCollectives(collective_client_t* client, int rank, int size) {
  int32_t values[8];
  const int64_t shape[1] = {8};
  const collective_tensor_t tensor = {values, COLLECTIVE_INT32, shape, 1};
  collective_handle_t handle = 0;
  for (int i = 0; i < 8; ++i) values[i] = rank * 100 + i;
  if (collective_broadcast_async(client, "c.broadcast", &tensor, values, size - 1,
                                 COLLECTIVE_GLOBAL_PROCESS_SET, &handle) != 0 ||
      collective_wait(client, handle, 30.0, NULL, NULL) != 0 || values[3] != (size - 1) * 100 + 3) {
    Fail("broadcast");
  }

  int64_t splits[16];
  int16_t send[256];
  int64_t rows = 0;
  for (int j = 0; j < size; ++j) {
    splits[j] = j;
    for (int k = 0; k < j; ++k) send[rows++] = (int16_t)(rank * 10 + j);
  }
  const int64_t send_shape[1] = {rows};
  const collective_tensor_t sent = {send, COLLECTIVE_INT16, send_shape, 1};
  const void* view = NULL;
  int64_t received[16];
  int count = 0;
  if (collective_alltoall_async(client, "c.alltoall", &sent, splits, size,
                                COLLECTIVE_GLOBAL_PROCESS_SET, &handle) != 0 ||
      collective_wait(client, handle, 30.0, &view, NULL) != 0 ||
      collective_received_splits(client, handle, received, 16, &count) != 0) {
    Fail("alltoall");
  } else {
    const int16_t* got = (const int16_t*)view;
    int index = 0;
    if (count != size) Fail("alltoall: received splits count");
    for (int sender = 0; sender < size && count == size; ++sender) {
      if (received[sender] != rank) Fail("alltoall: received split");
      for (int k = 0; k < rank; ++k, ++index) {
        if (got[index] != sender * 10 + rank) Fail("alltoall: value");
      }
    }
    collective_release(client, handle);
  }

  float scatter[5];
  float mine[2] = {0, 0};
  const int64_t scatter_shape[1] = {5};
  const collective_tensor_t scattered = {scatter, COLLECTIVE_FLOAT32, scatter_shape, 1};
  for (int i = 0; i < 5; ++i) scatter[i] = (float)(i + rank);
  const int first = rank * (5 / size) + (rank < 5 % size ? rank : 5 % size);
  const int own = 5 / size + (rank < 5 % size ? 1 : 0);
  if (collective_reducescatter_async(client, "c.reducescatter", &scattered, mine, COLLECTIVE_SUM,
                                     1.0, 1.0, COLLECTIVE_GLOBAL_PROCESS_SET, &handle) != 0 ||
      collective_wait(client, handle, 30.0, NULL, NULL) != 0) {
    Fail("reducescatter");
  } else {
    for (int i = 0; i < own; ++i) {
      if (mine[i] != (float)(size * (first + i) + size * (size - 1) / 2)) {
        Fail("reducescatter: value");
      }
    }
  }
}

/* Reduce to the last rank, gather to rank 0 (rank r sends r + 1 rows, read
 * through a view), scatter from rank 0 (rank r receives r rows). */
static void Rooted(collective_client_t* client, int rank, int size) {
  int32_t values[4];
  int32_t reduced[4] = {-1, -1, -1, -1};
  const int64_t shape[1] = {4};
  const collective_tensor_t tensor = {values, COLLECTIVE_INT32, shape, 1};
  collective_handle_t handle = 0;
  for (int i = 0; i < 4; ++i) values[i] = Value(rank, i);
  if (collective_reduce_async(client, "c.reduce", &tensor, reduced, COLLECTIVE_SUM, 1.0, 1.0,
                              size - 1, COLLECTIVE_GLOBAL_PROCESS_SET, &handle) != 0 ||
      collective_wait(client, handle, 30.0, NULL, NULL) != 0) {
    Fail("reduce");
  } else if (reduced[2] != (rank == size - 1 ? SumOverRanks(size, 2) : -1)) {
    Fail("reduce: value");
  }

  int64_t rows_shape[1] = {rank + 1};
  const collective_tensor_t rows = {values, COLLECTIVE_INT32, rows_shape, 1};
  const void* view = NULL;
  size_t bytes = 0;
  if (collective_gather_async(client, "c.gather", &rows, 0, COLLECTIVE_GLOBAL_PROCESS_SET, NULL, 0,
                              &handle) != 0 ||
      collective_wait(client, handle, 30.0, &view, &bytes) != 0) {
    Fail("gather");
  } else {
    const size_t expected = rank == 0 ? (size_t)(size * (size + 1) / 2) * sizeof(int32_t) : 0;
    if (bytes != expected) Fail("gather: size");
    if (rank == 0 && ((const int32_t*)view)[1] != Value(1, 0)) Fail("gather: value");
    collective_release(client, handle);
  }

  int32_t whole[64];
  int32_t mine[16] = {0};
  int64_t whole_shape[1] = {rank == 0 ? size * (size - 1) / 2 : 0};
  const collective_tensor_t sent = {whole, COLLECTIVE_INT32, whole_shape, 1};
  for (int i = 0; i < 64; ++i) whole[i] = i * 7;
  if (collective_scatter_async(client, "c.scatter", &sent, rank, 0, COLLECTIVE_GLOBAL_PROCESS_SET,
                               mine, sizeof(mine), &handle) != 0 ||
      collective_wait(client, handle, 30.0, NULL, NULL) != 0) {
    Fail("scatter");
  } else {
    /* Rank r's rows start after 0 + 1 + ... + (r - 1). */
    const int first = rank * (rank - 1) / 2;
    for (int i = 0; i < rank; ++i) {
      if (mine[i] != (first + i) * 7) Fail("scatter: value");
    }
  }
}

static void GroupsSetsBarrierJoin(collective_client_t* client, int rank, int size) {
  float a[3] = {1, 1, 1};
  float b[2] = {2, 2};
  const int64_t shape_a[1] = {3};
  const int64_t shape_b[1] = {2};
  const collective_tensor_t inputs[2] = {{a, COLLECTIVE_FLOAT32, shape_a, 1},
                                         {b, COLLECTIVE_FLOAT32, shape_b, 1}};
  const char* names[2] = {"c.group.a", "c.group.b"};
  void* outputs[2] = {a, b};
  collective_handle_t handles[2] = {0, 0};
  if (collective_grouped_allreduce_async(client, 2, names, inputs, outputs, COLLECTIVE_SUM, 1.0,
                                         1.0, COLLECTIVE_GLOBAL_PROCESS_SET, handles) != 0 ||
      collective_wait(client, handles[0], 30.0, NULL, NULL) != 0 ||
      collective_wait(client, handles[1], 30.0, NULL, NULL) != 0 || a[2] != (float)size ||
      b[1] != (float)(2 * size)) {
    Fail("grouped allreduce");
  }
  if (collective_barrier(client, COLLECTIVE_GLOBAL_PROCESS_SET) != 0) Fail("barrier");

  const int ranks[1] = {0};
  int32_t id = -1;
  int included = -1;
  int set_size = 0;
  if (collective_add_process_set(client, ranks, 1, &id) != 0 || id < 1 ||
      collective_process_set_included(client, id, &included) != 0 || included != (rank == 0) ||
      collective_process_set_size(client, id, &set_size) != 0 || set_size != 1) {
    Fail("add process set");
  }
  if (rank == 0) {
    int set_rank = -1;
    float x = 7;
    const int64_t one[1] = {1};
    if (collective_process_set_rank(client, id, &set_rank) != 0 || set_rank != 0 ||
        collective_allreduce_tensor_async(client, "c.set",
                                          &(collective_tensor_t){&x, COLLECTIVE_FLOAT32, one, 1},
                                          &x, COLLECTIVE_SUM, 1.0, 1.0, id, &handles[0]) != 0 ||
        collective_wait(client, handles[0], 30.0, NULL, NULL) != 0 || x != 7) {
      Fail("allreduce on a process set of one");
    }
  }
  if (collective_remove_process_set(client, id) != 0) Fail("remove process set");
  int last = -1;
  if (collective_join(client, COLLECTIVE_GLOBAL_PROCESS_SET, &last) != 0 || last < 0 ||
      last >= size) {
    Fail("join");
  }
}

/* Expects `code` from a call and a last error containing `text`. */
static void ExpectError(const char* what, int got, int code, const char* text) {
  if (got != code || strstr(collective_last_error(), text) == NULL) {
    fprintf(stderr, "c-api-worker: %s: got %d '%s', expected %d '...%s...'\n", what, got,
            collective_last_error(), code, text);
    ++failures;
  }
}

static void Errors(collective_client_t* client) {
  uint8_t flags[4] = {1, 0, 1, 0};
  const int64_t shape[1] = {4};
  collective_handle_t handle = 0;
  ExpectError("bool sum",
              collective_allreduce(client, "c.bool", flags, flags, COLLECTIVE_BOOL, shape, 1,
                                   COLLECTIVE_SUM, 1.0, 1.0),
              kInvalidArgument, "is not defined for bool tensors (bool supports min and max)");
  ExpectError("adasum",
              collective_allreduce(client, "c.adasum", flags, flags, COLLECTIVE_UINT8, shape, 1,
                                   COLLECTIVE_ADASUM, 1.0, 1.0),
              kInvalidArgument, "reduce op adasum is not defined for uint8 tensors");
  ExpectError("NULL name",
              collective_allreduce_async(client, NULL, flags, flags, COLLECTIVE_UINT8, shape, 1,
                                         COLLECTIVE_MAX, 1.0, 1.0, &handle),
              kInvalidArgument, "NULL");
  ExpectError("NULL output",
              collective_allreduce(client, "c.null", flags, NULL, COLLECTIVE_UINT8, shape, 1,
                                   COLLECTIVE_MAX, 1.0, 1.0),
              kInvalidArgument, "output buffer is NULL");
  ExpectError("unknown handle", collective_wait(client, 987654321, 0.0, NULL, NULL),
              kInvalidArgument, "unknown request handle");
}

int main(void) {
  collective_options_t options;
  collective_client_t* client = NULL;
  collective_options_init(&options);
  if (collective_connect(&options, &client) != 0) {
    fprintf(stderr, "c-api-worker: connect: %s\n", collective_last_error());
    return 1;
  }
  const int rank = collective_rank(client);
  const int size = collective_size(client);
  if (collective_local_size(client) != size || collective_local_rank(client) != rank ||
      collective_cross_size(client) != 1 || collective_cross_rank(client) != 0 ||
      !collective_is_homogeneous(client)) {
    fprintf(stderr, "c-api-worker: unexpected topology for rank %d of %d\n", rank, size);
    ++failures;
  }
  AverageFloat32(client, rank, size);
  SumInt32InArena(client, rank, size);
  int32_t* owned_data = NULL;
  collective_buffer_t* owned = OwnedBufferAsOutput(client, rank, &owned_data);
  Allgather(client, rank, size);
  OtherCollectives(client, rank, size);
  Rooted(client, rank, size);
  GroupsSetsBarrierJoin(client, rank, size);
  Errors(client);
  /* The client still works after the refused calls. */
  AverageFloat32(client, rank, size);
  if (strcmp(collective_last_error(), "") == 0) Fail("collective_last_error was cleared");
  collective_close(client);
  /* The owned buffer outlived the handle: its memory is still mapped. */
  if (owned != NULL) {
    for (int i = 0; i < kCount; ++i) {
      if (owned_data[i] != SumOverRanks(size, i)) {
        fprintf(stderr, "c-api-worker: owned buffer [%d] = %d after close, expected %d\n", i,
                owned_data[i], SumOverRanks(size, i));
        ++failures;
        break;
      }
    }
    collective_buffer_free(owned);
  }
  if (failures != 0) return 1;
  printf("ok rank %d of %d\n", rank, size);
  return 0;
}
