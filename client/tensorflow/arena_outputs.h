// Op outputs in the trainer's shared-memory arena: an allreduce's, a
// broadcast's or a reducescatter's output allocated there is written by the
// daemon itself (no copy out of the result segment), and an op that takes
// such a tensor as its input reads it in place (no copy in). TensorFlow lets
// a kernel give an output a tensor of its own allocator; this one lends arena
// blocks that outlive the connection's handle (collective_buffer_try_alloc
// keeps the arena mapped), so a tensor kept past shutdown() stays valid.
//
// Threads: TensorFlow's kernel threads allocate, and whichever thread drops a
// tensor's last reference frees; the allocator's map is locked.
#pragma once

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace collective::tensorflow {

// Outputs smaller than this take TensorFlow's allocator: for them a copy
// costs less than an arena block.
inline constexpr size_t kArenaOutputMinBytes = size_t{1} << 16;

// Allocates output `index` of `shape` in the arena when it holds at least
// kArenaOutputMinBytes, leaves at least half of the arena free (the rest
// stays for the copies of inputs) and a block is free now;
// otherwise as TensorFlow allocates outputs. COLLECTIVE_TF_ARENA_OUTPUTS=0 in
// the environment turns arena outputs off.
absl::Status AllocateOutput(::tensorflow::OpKernelContext* context, int index,
                            const ::tensorflow::TensorShape& shape, ::tensorflow::Tensor** output);

// A tensor of `dtype` and `shape` in the arena for a tensor the trainer
// moves there to keep (collective.tensorflow.to_arena): it may take at most
// half of the arena's free space, so that copies of other inputs and arena
// outputs keep room. Uninitialized when there is no session, the tensor does
// not fit that share, or no block is free now.
::tensorflow::Tensor ArenaTensor(::tensorflow::DataType dtype,
                                 const ::tensorflow::TensorShape& shape);

}  // namespace collective::tensorflow
