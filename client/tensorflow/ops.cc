// The TensorFlow ops of collective.tensorflow and their shape functions
// (registered when the library loads; kernels.cc has the kernels). Every op
// names its tensor across ranks with `tensor_name`, or, when that is empty,
// with the node's name (without its name scopes if `ignore_name_scope`), as
// Horovod's ops do in a graph, and runs within the process set
// `process_set_id`. The grouped ops take tensors of several dtypes (a list
// of types), each member reduced or gathered in its own.
#include <string>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace collective::tensorflow {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// The dtypes of libcollective that TensorFlow has; reductions take every one
// but bool.
#define COLLECTIVE_EVERY_TYPE \
  "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}"
#define COLLECTIVE_REDUCIBLE_TYPES \
  "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double}"
constexpr char kEveryType[] = "T: " COLLECTIVE_EVERY_TYPE;
constexpr char kReducibleTypes[] = "T: " COLLECTIVE_REDUCIBLE_TYPES;
// A grouped op's: one dtype per member.
constexpr char kEveryTypeList[] = "T: list(" COLLECTIVE_EVERY_TYPE ") >= 1";
constexpr char kReducibleTypeList[] = "T: list(" COLLECTIVE_REDUCIBLE_TYPES ") >= 1";
#undef COLLECTIVE_EVERY_TYPE
#undef COLLECTIVE_REDUCIBLE_TYPES

// The attributes that name a tensor op's tensor and place it in a process
// set, and those of every reduction op (allreduce and reducescatter, alone or
// grouped) after its dtypes. Macros: REGISTER_OP's chain of calls takes no
// function.
#define COLLECTIVE_NAME_ATTRS()                \
  Attr("tensor_name: string = ''")             \
      .Attr("ignore_name_scope: bool = false") \
      .Attr("process_set_id: int = 0")
#define COLLECTIVE_REDUCTION_ATTRS()         \
  Attr("reduce_op: int")                     \
      .Attr("prescale_factor: float = 1.0")  \
      .Attr("postscale_factor: float = 1.0") \
      .COLLECTIVE_NAME_ATTRS()

// The input's shape with the first dimension left to the run: what each rank
// contributes (allgather) or receives (alltoall) is known only then.
absl::Status FirstDimensionUnknown(InferenceContext* c) {
  ShapeHandle input;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &input));
  ShapeHandle output;
  TF_RETURN_IF_ERROR(c->ReplaceDim(input, 0, c->UnknownDim(), &output));
  c->set_output(0, output);
  return absl::OkStatus();
}

// FirstDimensionUnknown for every input of a grouped op; `op` names it in
// the error for a scalar, in Horovod's words.
absl::Status EachFirstDimensionUnknown(InferenceContext* c, const char* op) {
  for (int i = 0; i < c->num_inputs(); ++i) {
    if (c->RankKnown(c->input(i)) && c->Rank(c->input(i)) == 0) {
      return absl::InvalidArgumentError(std::string(op) + " does not support scalar inputs.");
    }
    ShapeHandle input;
    TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(i), 1, &input));
    ShapeHandle output;
    TF_RETURN_IF_ERROR(c->ReplaceDim(input, 0, c->UnknownDim(), &output));
    c->set_output(i, output);
  }
  return absl::OkStatus();
}

REGISTER_OP("CollectiveAllreduce")
    .Attr(kReducibleTypes)
    .COLLECTIVE_REDUCTION_ATTRS()
    .Input("tensor: T")
    .Output("reduced: T")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc("The reduction (a collective::ReduceOp) of `tensor` over the process set's ranks.");

REGISTER_OP("CollectiveGroupedAllreduce")
    .Attr(kReducibleTypeList)
    .COLLECTIVE_REDUCTION_ATTRS()
    .Input("tensors: T")
    .Output("reduced: T")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    })
    .Doc("CollectiveAllreduce of each tensor, negotiated and run together as one group.");

REGISTER_OP("CollectiveAllgather")
    .Attr(kEveryType)
    .COLLECTIVE_NAME_ATTRS()
    .Input("tensor: T")
    .Output("gathered: T")
    .SetShapeFn(FirstDimensionUnknown)
    .Doc("Every rank's `tensor`, concatenated in rank order along the first dimension.");

REGISTER_OP("CollectiveBroadcast")
    .Attr(kEveryType)
    .Attr("root_rank: int")
    .COLLECTIVE_NAME_ATTRS()
    .Input("tensor: T")
    .Output("broadcast: T")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc("The `tensor` of root_rank (counted within the process set) on every rank.");

REGISTER_OP("CollectiveAlltoall")
    .Attr(kEveryType)
    .COLLECTIVE_NAME_ATTRS()
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("received: T")
    .Output("received_splits: int32")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(FirstDimensionUnknown(c));
      ShapeHandle splits;
      TF_RETURN_IF_ERROR(c->WithRankAtMost(c->input(1), 1, &splits));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc(
        "splits[j] rows of `tensor` go to rank j of the process set (an empty splits: "
        "evenly); returns the rows received, in rank order, and how many came from each rank.");

REGISTER_OP("CollectiveGroupedAllgather")
    .Attr(kEveryTypeList)
    .COLLECTIVE_NAME_ATTRS()
    .Input("tensors: T")
    .Output("gathered: T")
    .SetShapeFn([](InferenceContext* c) {
      return EachFirstDimensionUnknown(c, "CollectiveGroupedAllgather");
    })
    .Doc("CollectiveAllgather of each tensor, negotiated and run together as one group.");

// Reducescatter: the first dimension of the reduced tensor is divided among
// the set's ranks (the first rows-mod-size ranks get one row more), which
// the shape function leaves to the run, as Horovod's does.
REGISTER_OP("CollectiveReducescatter")
    .Attr(kReducibleTypes)
    .COLLECTIVE_REDUCTION_ATTRS()
    .Input("tensor: T")
    .Output("scattered: T")
    .SetShapeFn([](InferenceContext* c) {
      return EachFirstDimensionUnknown(c, "CollectiveReducescatter");
    })
    .Doc("This rank's rows of the reduction (Sum or Average) of `tensor` over the set's ranks.");

REGISTER_OP("CollectiveGroupedReducescatter")
    .Attr(kReducibleTypeList)
    .COLLECTIVE_REDUCTION_ATTRS()
    .Input("tensors: T")
    .Output("scattered: T")
    .SetShapeFn([](InferenceContext* c) {
      return EachFirstDimensionUnknown(c, "CollectiveGroupedReducescatter");
    })
    .Doc("CollectiveReducescatter of each tensor, negotiated and run together as one group.");

// Barrier and join: stateful, so that TensorFlow neither prunes them from a
// graph nor merges two of them.
REGISTER_OP("CollectiveBarrier")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc("Returns once every rank of the process set has reached its barrier.");

REGISTER_OP("CollectiveJoin")
    .Attr("process_set_id: int = 0")
    .Output("last_rank: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc(
        "This rank has finished its data: until every rank of the set joins, its allreduces "
        "contribute zeros. Returns the rank (within the set) that joined last.");

#undef COLLECTIVE_REDUCTION_ATTRS
#undef COLLECTIVE_NAME_ATTRS

}  // namespace
}  // namespace collective::tensorflow
