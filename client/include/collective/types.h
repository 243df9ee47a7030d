// The vocabulary of the client API. The numeric values are those of the wire
// API (proto/collective/v1/types.proto) and of the C ABI, and never change.
#pragma once

#include <cstddef>
#include <cstdint>

namespace collective {

enum class DataType : int32_t {
  kUInt8 = 1,
  kInt8 = 2,
  kUInt16 = 3,
  kInt16 = 4,
  kInt32 = 5,
  kInt64 = 6,
  kFloat16 = 7,
  kBFloat16 = 8,
  kFloat32 = 9,
  kFloat64 = 10,
  kBool = 11,
};

enum class ReduceOp : int32_t {
  kSum = 1,
  kAverage = 2,
  kMin = 3,
  kMax = 4,
  kProduct = 5,
  kAdasum = 6,  // Horovod's Adasum: allreduce of floating-point host tensors
};

// Which ranks ReduceOp::kAdasum combines. Values are those of the wire's
// AdasumScope.
enum class AdasumScope : int32_t {
  // Every rank, as a binary tree in set-rank order (Horovod's host tensors);
  // needs a power-of-two number of ranks.
  kRanks = 0,
  // Horovod's NCCL build for GPU tensors: each node's ranks summed, the
  // nodes' sums combined by Adasum, the result divided by the ranks per node
  // (the average on one node); needs a power-of-two number of nodes.
  kNodes = 1,
};

// Where a tensor's data lies. Values are those of the wire's MemoryKind.
enum class Device : int32_t {
  kCpu = 0,   // host memory (the client's arena, or copied into it)
  kCuda = 1,  // CUDA device memory, handed to the daemon through CUDA IPC
};

// Bytes per element; 0 for a value outside the enum.
size_t DataTypeSize(DataType dtype);

struct Topology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  bool is_homogeneous = true;
};

}  // namespace collective
