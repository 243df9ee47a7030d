// Tensors the trainer keeps in its shared-memory arena
// (collective.tensorflow.to_arena and in_arena): a collective reads an input
// that lies there in place, with no copy in, as collective.torch's arena
// tensors. TensorFlow's tensors are immutable, so a "move" is a new tensor in
// the arena holding the same values (one copy, once), which the trainer uses
// in place of the old one: gradients it reduces at every step, buffers it
// broadcasts again and again.
//
// Stateful ops: TensorFlow must neither fold CollectiveToArena of a constant
// into a constant of its own memory nor merge two of them.
#include <cstring>
#include <string>

#include "arena_outputs.h"
#include "collective/collective.h"
#include "op_session.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace collective::tensorflow {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

REGISTER_OP("CollectiveToArena")
    .Attr("T: list(type) >= 1")
    .Input("tensors: T")
    .Output("moved: T")
    .SetIsStateful()
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    })
    .Doc(
        "Each tensor with its values in the arena; one that lies there already, is empty, or "
        "does not fit in half of the arena's free space is itself.");

REGISTER_OP("CollectiveInArena")
    .Attr("T: type")
    .Input("tensor: T")
    .Output("in_arena: bool")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("Whether the data of `tensor` lies in the arena of this process's connection.");

absl::Status NotInitialized(const char* op) {
  return absl::FailedPreconditionError(
      std::string(op) +
      ": collective.tensorflow is not initialized; call collective.tensorflow.init() first.");
}

// Whether `tensor`'s data lies in the current session's arena; false with
// `*initialized` false before init().
bool InArena(const Tensor& tensor, bool* initialized) {
  const auto data = tensor.tensor_data();
  bool in_arena = false;
  *initialized = OpSession::WithCurrent([&](OpSession& session) {
    in_arena =
        !data.empty() && collective_in_arena(session.client(), data.data(), data.size()) == 1;
  });
  return in_arena;
}

class ToArenaKernel : public OpKernel {
 public:
  explicit ToArenaKernel(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    for (int i = 0; i < context->num_inputs(); ++i) {
      const Tensor& input = context->input(i);
      bool initialized = false;
      const bool there = InArena(input, &initialized);
      OP_REQUIRES(context, initialized, NotInitialized("to_arena"));
      // Strings and resources have no flat bytes to copy; empty tensors
      // nothing to place.
      if (there || input.NumElements() == 0 || !::tensorflow::DataTypeCanUseMemcpy(input.dtype())) {
        context->set_output(i, input);
        continue;
      }
      Tensor moved = ArenaTensor(input.dtype(), input.shape());
      if (!moved.IsInitialized()) {
        context->set_output(i, input);  // no room: it stays where it is
        continue;
      }
      std::memcpy(const_cast<char*>(moved.tensor_data().data()), input.tensor_data().data(),
                  input.tensor_data().size());
      context->set_output(i, moved);
    }
  }
};

class InArenaKernel : public OpKernel {
 public:
  explicit InArenaKernel(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    bool initialized = false;
    const bool there = InArena(context->input(0), &initialized);
    OP_REQUIRES(context, initialized, NotInitialized("in_arena"));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({}), &output));
    output->scalar<bool>()() = there;
  }
};

REGISTER_KERNEL_BUILDER(Name("CollectiveToArena").Device(::tensorflow::DEVICE_CPU), ToArenaKernel);
REGISTER_KERNEL_BUILDER(Name("CollectiveInArena").Device(::tensorflow::DEVICE_CPU), InArenaKernel);

}  // namespace
}  // namespace collective::tensorflow
