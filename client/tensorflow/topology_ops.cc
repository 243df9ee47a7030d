// Horovod's size_op, local_size_op, rank_op, local_rank_op and
// process_set_included_op: int32 scalars read when the op runs, not when the
// graph is built, so a saved graph or a tf.function traced before a re-init
// (elastic training) sees the job of the moment. Stateful, so that
// TensorFlow neither folds them into constants nor merges two of them.
//
// Synchronous kernels: they read the client's topology, which libcollective
// holds in memory; nothing waits on the daemon.
#include <cstdint>
#include <functional>
#include <string>

#include "collective/collective.h"
#include "op_session.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace collective::tensorflow {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// What one op reads: a value of the client, or of process set `set`; a code
// other than 0 (with collective_last_error set) when it cannot.
using Read = std::function<int(const collective_client_t*, int32_t set, int* value)>;

class TopologyKernel : public OpKernel {
 public:
  TopologyKernel(OpKernelConstruction* context, std::string what, Read read)
      : OpKernel(context), what_(std::move(what)), read_(std::move(read)) {
    if (context->HasAttr("process_set_id")) {
      int64_t set = 0;
      OP_REQUIRES_OK(context, context->GetAttr("process_set_id", &set));
      process_set_ = static_cast<int32_t>(set);
    }
  }

  void Compute(OpKernelContext* context) override {
    int value = 0;
    int code = 0;
    std::string error;
    const bool initialized = OpSession::WithCurrent([&](OpSession& session) {
      code = read_(session.client(), process_set_, &value);
      if (code != 0) error = collective_last_error();
    });
    OP_REQUIRES(context, initialized,
                absl::FailedPreconditionError(
                    "collective.tensorflow is not initialized: call collective.tensorflow.init() "
                    "before reading the " +
                    what_ + "."));
    OP_REQUIRES(context, code == 0,
                absl::Status(static_cast<absl::StatusCode>(code),
                             "cannot read the " + what_ + " of process set " +
                                 std::to_string(process_set_) + ": " + error));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({}), &output));
    output->scalar<int32_t>()() = value;
  }

 private:
  const std::string what_;
  const Read read_;
  int32_t process_set_ = 0;
};

// A kernel class per op, as REGISTER_KERNEL_BUILDER takes a class.
#define COLLECTIVE_TOPOLOGY_KERNEL(Class, what, read)                                      \
  class Class : public TopologyKernel {                                                    \
   public:                                                                                 \
    explicit Class(OpKernelConstruction* context) : TopologyKernel(context, what, read) {} \
  };                                                                                       \
  REGISTER_KERNEL_BUILDER(Name("Collective" #Class).Device(::tensorflow::DEVICE_CPU), Class)

// A value of the whole job; the process set is not asked.
Read OfJob(int (*read)(const collective_client_t*)) {
  return [read](const collective_client_t* client, int32_t, int* value) {
    *value = read(client);
    return 0;
  };
}

COLLECTIVE_TOPOLOGY_KERNEL(Size, "size", collective_process_set_size);
COLLECTIVE_TOPOLOGY_KERNEL(LocalSize, "local size", OfJob(collective_local_size));
COLLECTIVE_TOPOLOGY_KERNEL(Rank, "rank", OfJob(collective_rank));
COLLECTIVE_TOPOLOGY_KERNEL(LocalRank, "local rank", OfJob(collective_local_rank));
COLLECTIVE_TOPOLOGY_KERNEL(ProcessSetIncluded, "membership", collective_process_set_included);

#undef COLLECTIVE_TOPOLOGY_KERNEL

REGISTER_OP("CollectiveSize")
    .Attr("process_set_id: int = 0")
    .Output("size: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("The number of ranks in the process set, when the op runs.");

REGISTER_OP("CollectiveLocalSize")
    .Output("local_size: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("The number of ranks on this node, when the op runs.");

REGISTER_OP("CollectiveRank")
    .Output("rank: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("This process's rank in the job, when the op runs.");

REGISTER_OP("CollectiveLocalRank")
    .Output("local_rank: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("This process's rank on its node, when the op runs.");

REGISTER_OP("CollectiveProcessSetIncluded")
    .Attr("process_set_id: int = 0")
    .Output("included: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("1 if this process belongs to the process set, 0 if not, when the op runs.");

}  // namespace
}  // namespace collective::tensorflow
