/* collective-c-api-worker: one rank of a job, written in C against
 * libcollective's C ABI only (collective/collective.h), to prove that the
 * header compiles as C and that the ABI works end to end. Connects from the
 * launcher's environment (COLLECTIVE_SOCKET, LOCAL_RANK, LOCAL_SIZE), then:
 * a float32 average from private memory into private memory, an int32 sum
 * from an arena buffer (collective_alloc) read back through a view, and
 * refused calls whose status code and collective_last_error are checked.
 * Prints "ok rank R of N" and exits 0, or says on stderr what went wrong and
 * exits 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/collective.h"

enum { kCount = 1000, kInvalidArgument = 3, kUnimplemented = 12 };

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
              kInvalidArgument, "bool tensors support only the min and max reduce ops");
  ExpectError("adasum",
              collective_allreduce(client, "c.adasum", flags, flags, COLLECTIVE_UINT8, shape, 1,
                                   COLLECTIVE_ADASUM, 1.0, 1.0),
              kUnimplemented, "adasum");
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
  Errors(client);
  /* The client still works after the refused calls. */
  AverageFloat32(client, rank, size);
  if (strcmp(collective_last_error(), "") == 0) Fail("collective_last_error was cleared");
  collective_close(client);
  if (failures != 0) return 1;
  printf("ok rank %d of %d\n", rank, size);
  return 0;
}
