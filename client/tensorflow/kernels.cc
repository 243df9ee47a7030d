// The asynchronous CPU kernels of collective.tensorflow's ops. ComputeAsync
// submits the request (libcollective copies the input into the arena) and
// returns TensorFlow's thread at once; the session's completion thread then
// copies the result into the op's output and calls `done`. An error from the
// daemon, which every rank of the collective receives, becomes the op's
// status with the daemon's message and the same code.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "arena_outputs.h"
#include "collective/collective.h"
#include "op_session.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace collective::tensorflow {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// TensorFlow's dtypes as libcollective's; false for one the daemon lacks
// (the ops' type lists admit none such).
bool ToDataType(::tensorflow::DataType dtype, collective_dtype_t* out) {
  struct Pair {
    ::tensorflow::DataType tensorflow;
    collective_dtype_t collective;
  };
  static constexpr Pair kPairs[] = {
      {::tensorflow::DT_UINT8, COLLECTIVE_UINT8},
      {::tensorflow::DT_INT8, COLLECTIVE_INT8},
      {::tensorflow::DT_UINT16, COLLECTIVE_UINT16},
      {::tensorflow::DT_INT16, COLLECTIVE_INT16},
      {::tensorflow::DT_INT32, COLLECTIVE_INT32},
      {::tensorflow::DT_INT64, COLLECTIVE_INT64},
      {::tensorflow::DT_HALF, COLLECTIVE_FLOAT16},
      {::tensorflow::DT_BFLOAT16, COLLECTIVE_BFLOAT16},
      {::tensorflow::DT_FLOAT, COLLECTIVE_FLOAT32},
      {::tensorflow::DT_DOUBLE, COLLECTIVE_FLOAT64},
      {::tensorflow::DT_BOOL, COLLECTIVE_BOOL},
  };
  for (const Pair& pair : kPairs) {
    if (pair.tensorflow == dtype) {
      *out = pair.collective;
      return true;
    }
  }
  return false;
}

// A TensorFlow tensor as the C ABI describes it; keeps the shape it points
// to.
class InputView {
 public:
  explicit InputView(const Tensor& tensor) {
    for (int d = 0; d < tensor.dims(); ++d) shape_.push_back(tensor.dim_size(d));
    view_.data = tensor.tensor_data().data();
    view_.shape = shape_.data();
    view_.ndims = static_cast<int>(shape_.size());
  }
  // False for a dtype the daemon lacks.
  bool SetDataType(::tensorflow::DataType dtype) { return ToDataType(dtype, &view_.dtype); }
  const collective_tensor_t* get() const { return &view_; }

 private:
  std::vector<int64_t> shape_;
  collective_tensor_t view_{};
};

// The result's shape from a completed view (allgather and alltoall learn
// their first dimension here).
absl::Status ResultShape(const Completion& completion, TensorShape* shape) {
  int64_t dims[::tensorflow::TensorShape::MaxDimensions()];
  int count = 0;
  if (collective_result_shape(completion.client, completion.handle, dims,
                              ::tensorflow::TensorShape::MaxDimensions(), &count) != 0) {
    return absl::InternalError(collective_last_error());
  }
  if (count > ::tensorflow::TensorShape::MaxDimensions()) {
    return absl::InternalError("The daemon's result has more dimensions than TensorFlow allows.");
  }
  return TensorShape::BuildTensorShape(absl::Span<const int64_t>(dims, count), shape);
}

// An alltoall's rows received from each rank of process set `set`.
absl::Status ReceivedSplits(const Completion& completion, int32_t set,
                            std::vector<int64_t>* received) {
  int size = 0;
  if (collective_process_set_size(completion.client, set, &size) != 0) {
    return absl::InternalError(collective_last_error());
  }
  received->resize(static_cast<size_t>(size));
  int count = 0;
  if (collective_received_splits(completion.client, completion.handle, received->data(), size,
                                 &count) != 0) {
    return absl::InternalError(collective_last_error());
  }
  received->resize(static_cast<size_t>(std::min(count, size)));
  return absl::OkStatus();
}

// Copies a view result into `output` unless the daemon wrote it there.
void CopyOut(const Completion& completion, Tensor* output) {
  void* data = const_cast<char*>(output->tensor_data().data());
  const size_t bytes = std::min(completion.bytes, output->tensor_data().size());
  if (completion.view != nullptr && completion.view != data && bytes > 0) {
    std::memcpy(data, completion.view, bytes);
  }
}

// Output `index` shaped as the completed view result and filled from it: the
// results whose first dimension only the run knows (allgather, alltoall,
// reducescatter).
absl::Status OutputFromView(OpKernelContext* context, const Completion& completion, int index) {
  TensorShape shape;
  TF_RETURN_IF_ERROR(ResultShape(completion, &shape));
  Tensor* output = nullptr;
  TF_RETURN_IF_ERROR(context->allocate_output(index, shape, &output));
  CopyOut(completion, output);
  return absl::OkStatus();
}

// The name of a tensor that its op does not name: the op's node name, as
// Horovod's kernels take it (in a graph, the same on every rank that built
// the same graph, however many times a rank traced it), without the name
// scopes before the last '/' when `ignore_name_scope`.
std::string NodeName(const std::string& node, bool ignore_name_scope) {
  const size_t slash = node.find_last_of('/');
  if (!ignore_name_scope || slash == std::string::npos) return node;
  return node.substr(slash + 1);
}

// What every kernel shares: the tensor's name and process set, and starting
// a request and finishing it from the completion thread.
class CollectiveKernel : public AsyncOpKernel {
 public:
  CollectiveKernel(OpKernelConstruction* context, std::string kind)
      : AsyncOpKernel(context), kind_(std::move(kind)) {
    // Barrier and join have no tensor: their node's name says which.
    bool ignore_name_scope = false;
    if (context->HasAttr("tensor_name")) {
      OP_REQUIRES_OK(context, context->GetAttr("tensor_name", &tensor_name_));
      OP_REQUIRES_OK(context, context->GetAttr("ignore_name_scope", &ignore_name_scope));
    }
    int64_t process_set = 0;
    OP_REQUIRES_OK(context, context->GetAttr("process_set_id", &process_set));
    process_set_ = static_cast<int32_t>(process_set);
    if (tensor_name_.empty()) tensor_name_ = NodeName(name(), ignore_name_scope);
  }

 protected:
  // Starts `count` requests, filling their handles.
  using Start = std::function<int(collective_client_t*, collective_handle_t*)>;
  // Fills the outputs of request `index` from its completed result.
  using Finish = std::function<absl::Status(OpKernelContext*, const Completion&, int index)>;

  const std::string& tensor_name() const { return tensor_name_; }
  int32_t process_set() const { return process_set_; }

  // Checks input `index`'s dtype and fills `view`; false (with the op failed
  // and done) for one the daemon lacks.
  bool Describe(OpKernelContext* context, const DoneCallback& done, int index, InputView* view) {
    if (view->SetDataType(context->input(index).dtype())) return true;
    context->SetStatus(absl::InvalidArgumentError(
        "collective " + kind_ + " of '" + tensor_name_ + "': the daemon has no " +
        ::tensorflow::DataTypeString(context->input(index).dtype()) + " tensors."));
    done();
    return false;
  }

  // The inputs of a grouped op as the C ABI takes them, member i named
  // '<tensor_name>_<i+1>of<N>' as collective.torch and Horovod name the
  // members of a group.
  struct Group {
    std::vector<InputView> views;
    std::vector<collective_tensor_t> inputs;
    std::vector<std::string> names;
    std::vector<const char*> name_pointers;
  };

  // Fills `group` from every input; false (with the op failed and done) as
  // Describe.
  bool DescribeGroup(OpKernelContext* context, const DoneCallback& done, Group* group) {
    const int count = context->num_inputs();
    group->views.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      group->views.emplace_back(context->input(i));
      if (!Describe(context, done, i, &group->views.back())) return false;
      group->inputs.push_back(*group->views.back().get());
      group->names.push_back(tensor_name_ + "_" + std::to_string(i + 1) + "of" +
                             std::to_string(count));
    }
    for (const std::string& member : group->names) group->name_pointers.push_back(member.c_str());
    return true;
  }

  // Starts the requests with `start` and returns; on the completion thread,
  // `finish` fills the outputs of each completed request, and once the last
  // has completed the op takes the first error, if any, and `done` runs.
  void Run(OpKernelContext* context, DoneCallback done, int count, const Start& start,
           Finish finish) {
    absl::Status failed;
    const bool initialized = OpSession::WithCurrent([&](OpSession& session) {
      std::vector<collective_handle_t> handles(static_cast<size_t>(count));
      const int code = start(session.client(), handles.data());
      if (code != 0) {
        failed = Error(code, collective_last_error());
        return;
      }
      // Touched by the completion thread only.
      struct Outcome {
        int remaining;
        absl::Status status;
      };
      auto outcome = std::make_shared<Outcome>(Outcome{count, absl::OkStatus()});
      for (int i = 0; i < count; ++i) {
        session.Submit(handles[static_cast<size_t>(i)], [this, context, done, finish, outcome,
                                                         i](const Completion& completion) {
          outcome->status.Update(completion.code != 0 ? Error(completion.code, completion.message)
                                                      : finish(context, completion, i));
          if (--outcome->remaining > 0) return;
          context->SetStatus(outcome->status);
          done();
        });
      }
    });
    // `done` runs outside WithCurrent's lock: TensorFlow may start the next
    // kernel from it.
    if (!initialized) failed = NotInitialized();
    if (!failed.ok()) {
      context->SetStatus(failed);
      done();
    }
  }

  // Makes the blocking `call` (barrier, join) on the completion thread, in
  // its place among the requests submitted before; a code other than 0 from
  // it fails the op with the C ABI's error. Then `done` runs.
  void RunCall(OpKernelContext* context, DoneCallback done,
               std::function<int(collective_client_t*)> call) {
    const bool initialized = OpSession::WithCurrent([&](OpSession& session) {
      session.Call([this, context, done, call](collective_client_t* client) {
        const int code = call(client);
        if (code != 0) context->SetStatus(Error(code, collective_last_error()));
        done();
      });
    });
    if (!initialized) {
      context->SetStatus(NotInitialized());
      done();
    }
  }

 private:
  absl::Status NotInitialized() const {
    return absl::FailedPreconditionError(
        "collective " + kind_ + " of '" + tensor_name_ +
        "': collective.tensorflow is not initialized; call collective.tensorflow.init() "
        "before running its ops.");
  }

  absl::Status Error(int code, const std::string& message) const {
    return absl::Status(static_cast<absl::StatusCode>(code),
                        "collective " + kind_ + " of '" + tensor_name_ + "' failed: " + message);
  }

  std::string kind_;
  std::string tensor_name_;
  int32_t process_set_ = 0;
};

// A kernel of a reduction: its reduce op and scale factors, from the op's
// attributes.
class ReductionKernel : public CollectiveKernel {
 protected:
  ReductionKernel(OpKernelConstruction* context, std::string kind)
      : CollectiveKernel(context, std::move(kind)) {
    int64_t op = 0;
    OP_REQUIRES_OK(context, context->GetAttr("reduce_op", &op));
    op_ = static_cast<collective_op_t>(op);
    OP_REQUIRES_OK(context, context->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(context, context->GetAttr("postscale_factor", &postscale_));
  }

  collective_op_t op_ = COLLECTIVE_SUM;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

class AllreduceKernel : public ReductionKernel {
 public:
  explicit AllreduceKernel(OpKernelConstruction* context) : ReductionKernel(context, "allreduce") {}

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    const Tensor& input = context->input(0);
    InputView view(input);
    if (!Describe(context, done, 0, &view)) return;
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(context, AllocateOutput(context, 0, input.shape(), &output), done);
    // The daemon writes the result into an output in the arena; any other
    // output gets it copied straight in (in Wait).
    void* out =
        output->NumElements() > 0 ? const_cast<char*>(output->tensor_data().data()) : nullptr;
    Run(
        context, std::move(done), 1,
        [&](collective_client_t* client, collective_handle_t* handle) {
          return collective_allreduce_tensor_async(client, tensor_name().c_str(), view.get(), out,
                                                   op_, prescale_, postscale_, process_set(),
                                                   handle);
        },
        [output](OpKernelContext*, const Completion& completion, int) {
          CopyOut(completion, output);
          return absl::OkStatus();
        });
  }
};

// Allreduce of several tensors that the daemon negotiates and runs
// together.
class GroupedAllreduceKernel : public ReductionKernel {
 public:
  explicit GroupedAllreduceKernel(OpKernelConstruction* context)
      : ReductionKernel(context, "grouped allreduce") {}

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    const int count = context->num_inputs();
    Group group;
    if (!DescribeGroup(context, done, &group)) return;
    std::vector<void*> outputs;
    std::vector<Tensor*> output_tensors;
    for (int i = 0; i < count; ++i) {
      Tensor* output = nullptr;
      OP_REQUIRES_OK_ASYNC(context, AllocateOutput(context, i, context->input(i).shape(), &output),
                           done);
      output_tensors.push_back(output);
      outputs.push_back(output->NumElements() > 0 ? const_cast<char*>(output->tensor_data().data())
                                                  : nullptr);
    }
    Run(
        context, std::move(done), count,
        [&](collective_client_t* client, collective_handle_t* handles) {
          return collective_grouped_allreduce_async(client, count, group.name_pointers.data(),
                                                    group.inputs.data(), outputs.data(), op_,
                                                    prescale_, postscale_, process_set(), handles);
        },
        [output_tensors](OpKernelContext*, const Completion& completion, int index) {
          CopyOut(completion, output_tensors[static_cast<size_t>(index)]);
          return absl::OkStatus();
        });
  }
};

class AllgatherKernel : public CollectiveKernel {
 public:
  explicit AllgatherKernel(OpKernelConstruction* context)
      : CollectiveKernel(context, "allgather") {}

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    InputView view(context->input(0));
    if (!Describe(context, done, 0, &view)) return;
    Run(
        context, std::move(done), 1,
        [&](collective_client_t* client, collective_handle_t* handle) {
          return collective_allgather_async(client, tensor_name().c_str(), view.get(),
                                            process_set(), handle);
        },
        OutputFromView);
  }
};

class BroadcastKernel : public CollectiveKernel {
 public:
  explicit BroadcastKernel(OpKernelConstruction* context) : CollectiveKernel(context, "broadcast") {
    int64_t root_rank = 0;
    OP_REQUIRES_OK(context, context->GetAttr("root_rank", &root_rank));
    root_rank_ = static_cast<int>(root_rank);
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    const Tensor& input = context->input(0);
    InputView view(input);
    if (!Describe(context, done, 0, &view)) return;
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(context, AllocateOutput(context, 0, input.shape(), &output), done);
    void* out =
        output->NumElements() > 0 ? const_cast<char*>(output->tensor_data().data()) : nullptr;
    Run(
        context, std::move(done), 1,
        [&](collective_client_t* client, collective_handle_t* handle) {
          return collective_broadcast_async(client, tensor_name().c_str(), view.get(), out,
                                            root_rank_, process_set(), handle);
        },
        [output](OpKernelContext*, const Completion& completion, int) {
          CopyOut(completion, output);
          return absl::OkStatus();
        });
  }

 private:
  int root_rank_ = 0;
};

class AlltoallKernel : public CollectiveKernel {
 public:
  explicit AlltoallKernel(OpKernelConstruction* context) : CollectiveKernel(context, "alltoall") {}

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    InputView view(context->input(0));
    if (!Describe(context, done, 0, &view)) return;
    const auto given = context->input(1).flat<int32_t>();
    const std::vector<int64_t> splits(given.data(), given.data() + given.size());
    Run(
        context, std::move(done), 1,
        [&](collective_client_t* client, collective_handle_t* handle) {
          return collective_alltoall_async(client, tensor_name().c_str(), view.get(),
                                           splits.empty() ? nullptr : splits.data(),
                                           static_cast<int>(splits.size()), process_set(), handle);
        },
        [set = process_set()](OpKernelContext* ctx, const Completion& completion, int) {
          TF_RETURN_IF_ERROR(OutputFromView(ctx, completion, 0));
          std::vector<int64_t> received;
          TF_RETURN_IF_ERROR(ReceivedSplits(completion, set, &received));
          Tensor* splits_out = nullptr;
          const auto count = static_cast<int64_t>(received.size());
          TF_RETURN_IF_ERROR(ctx->allocate_output(1, TensorShape({count}), &splits_out));
          auto flat = splits_out->flat<int32_t>();
          for (int64_t i = 0; i < count; ++i) flat(i) = static_cast<int32_t>(received[i]);
          return absl::OkStatus();
        });
  }
};

class GroupedAllgatherKernel : public CollectiveKernel {
 public:
  explicit GroupedAllgatherKernel(OpKernelConstruction* context)
      : CollectiveKernel(context, "grouped allgather") {}

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    Group group;
    if (!DescribeGroup(context, done, &group)) return;
    const int count = context->num_inputs();
    Run(
        context, std::move(done), count,
        [&](collective_client_t* client, collective_handle_t* handles) {
          return collective_grouped_allgather_async(client, count, group.name_pointers.data(),
                                                    group.inputs.data(), process_set(), handles);
        },
        OutputFromView);
  }
};

// Reducescatter, alone or grouped. This rank's rows of each input are known
// before the run (the first dim0 mod size ranks of the set get one more, as
// in Horovod and the daemon), so each output is allocated up front, in the
// arena when it is large (AllocateOutput), where the daemon writes it. A
// scalar input (no rows: the daemon's client refuses it by name) and an
// empty share take the result's view, whose shape says how many rows.
class ReducescatterKernel : public ReductionKernel {
 public:
  explicit ReducescatterKernel(OpKernelConstruction* context)
      : ReducescatterKernel(context, false) {}

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    Group group;
    if (!DescribeGroup(context, done, &group)) return;
    const int count = context->num_inputs();
    std::vector<Tensor*> outputs(static_cast<size_t>(count), nullptr);
    std::vector<void*> addresses(static_cast<size_t>(count), nullptr);
    int rank = 0;
    int size = 0;
    if (SetPlace(&rank, &size)) {
      for (int i = 0; i < count; ++i) {
        const TensorShape& shape = context->input(i).shape();
        if (shape.dims() == 0) continue;
        TensorShape mine = shape;
        const int64_t rows = shape.dim_size(0);
        mine.set_dim(0, rows / size + (rank < rows % size ? 1 : 0));
        if (mine.num_elements() == 0) continue;
        OP_REQUIRES_OK_ASYNC(context, AllocateOutput(context, i, mine, &outputs[i]), done);
        addresses[i] = const_cast<char*>(outputs[i]->tensor_data().data());
      }
    }
    Run(
        context, std::move(done), count,
        [&](collective_client_t* client, collective_handle_t* handles) {
          if (!grouped_) {
            return collective_reducescatter_async(client, tensor_name().c_str(),
                                                  group.inputs.data(), addresses[0], op_, prescale_,
                                                  postscale_, process_set(), handles);
          }
          return collective_grouped_reducescatter_async(
              client, count, group.name_pointers.data(), group.inputs.data(), addresses.data(), op_,
              prescale_, postscale_, process_set(), handles);
        },
        [outputs](OpKernelContext* ctx, const Completion& completion, int index) {
          Tensor* output = outputs[static_cast<size_t>(index)];
          if (output == nullptr) return OutputFromView(ctx, completion, index);
          // Written by the daemon (an arena output) or copied in by the
          // client library.
          CopyOut(completion, output);
          return absl::OkStatus();
        });
  }

 protected:
  ReducescatterKernel(OpKernelConstruction* context, bool grouped)
      : ReductionKernel(context, grouped ? "grouped reducescatter" : "reducescatter"),
        grouped_(grouped) {}

 private:
  // This rank's place in the op's process set; false when the session or
  // the set is not there (Run then reports why).
  bool SetPlace(int* rank, int* size) const {
    bool known = false;
    OpSession::WithCurrent([&](OpSession& session) {
      known = collective_process_set_rank(session.client(), process_set(), rank) == 0 &&
              collective_process_set_size(session.client(), process_set(), size) == 0 &&
              *size > 0 && *rank >= 0;
    });
    return known;
  }

  const bool grouped_;
};

class GroupedReducescatterKernel : public ReducescatterKernel {
 public:
  explicit GroupedReducescatterKernel(OpKernelConstruction* context)
      : ReducescatterKernel(context, true) {}
};

class BarrierKernel : public CollectiveKernel {
 public:
  explicit BarrierKernel(OpKernelConstruction* context) : CollectiveKernel(context, "barrier") {}

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    RunCall(context, std::move(done), [set = process_set()](collective_client_t* client) {
      return collective_barrier(client, set);
    });
  }
};

// Join: the scalar output is the rank of the set that joined last, counted
// within the set.
class JoinKernel : public CollectiveKernel {
 public:
  explicit JoinKernel(OpKernelConstruction* context) : CollectiveKernel(context, "join") {}

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(context, context->allocate_output(0, TensorShape({}), &output), done);
    RunCall(context, std::move(done), [set = process_set(), output](collective_client_t* client) {
      int last_rank = -1;
      const int code = collective_join(client, set, &last_rank);
      output->scalar<int32_t>()() = last_rank;
      return code;
    });
  }
};

REGISTER_KERNEL_BUILDER(Name("CollectiveAllreduce").Device(::tensorflow::DEVICE_CPU),
                        AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("CollectiveGroupedAllreduce").Device(::tensorflow::DEVICE_CPU),
                        GroupedAllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("CollectiveAllgather").Device(::tensorflow::DEVICE_CPU),
                        AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("CollectiveBroadcast").Device(::tensorflow::DEVICE_CPU),
                        BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("CollectiveAlltoall").Device(::tensorflow::DEVICE_CPU),
                        AlltoallKernel);
REGISTER_KERNEL_BUILDER(Name("CollectiveBarrier").Device(::tensorflow::DEVICE_CPU), BarrierKernel);
REGISTER_KERNEL_BUILDER(Name("CollectiveJoin").Device(::tensorflow::DEVICE_CPU), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("CollectiveGroupedAllgather").Device(::tensorflow::DEVICE_CPU),
                        GroupedAllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("CollectiveReducescatter").Device(::tensorflow::DEVICE_CPU),
                        ReducescatterKernel);
REGISTER_KERNEL_BUILDER(Name("CollectiveGroupedReducescatter").Device(::tensorflow::DEVICE_CPU),
                        GroupedReducescatterKernel);

}  // namespace
}  // namespace collective::tensorflow
