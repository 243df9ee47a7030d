// The collectives of collective._core.Client. Each *_async call converts its
// arguments while it holds the GIL, then releases it: submitting copies the
// input into the arena and may wait for arena space or for the daemon's
// limit on outstanding requests. Lists of several tensors form a group that
// the daemon negotiates and runs together. CUDA tensors are not copied:
// libcollective orders the daemon's work after what the caller's stream has
// queued, and wait() makes that stream wait for the result. allreduce, the
// one synchronous call, submits and waits under one release of the GIL.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bindings.h"
#include "collective/client.h"
#include "errors.h"
#include "tensor_args.h"

namespace collective::python {
namespace {

namespace py = pybind11;

using Handles = std::vector<Client::Handle>;

// Allreduce and reducescatter: the same arguments, the same grouped call.
template <auto kSubmit>
Handles Reduction(Client& client, const std::vector<std::string>& names,
                  const std::vector<TensorArg>& inputs, const std::vector<std::uintptr_t>& outputs,
                  int op, double prescale, double postscale, int32_t process_set, int device,
                  std::uintptr_t cuda_stream, int adasum_scope) {
  const std::vector<TensorView> views = ToTensorViews(inputs, ToPlacement(device, cuda_stream));
  const std::vector<void*> pointers = ToPointers(outputs);
  const AllreduceOptions options{.op = ToReduceOp(op),
                                 .prescale = prescale,
                                 .postscale = postscale,
                                 .process_set = process_set,
                                 .adasum_scope = ToAdasumScope(adasum_scope)};
  py::gil_scoped_release release;
  return ValueOrThrow((client.*kSubmit)(names, views, pointers, options), ErrorPhase::kCall);
}

// One CPU tensor's allreduce, submitted and waited for under one release of
// the GIL, with no handle list and no Result object: the Python layer's
// synchronous allreduce (async_ops.allreduce_now), where a small tensor's
// cost is mostly the caller's own work. The result is written to `output`
// (which may be the input). A refused request raises as a call's error does,
// a failed one as wait() raises.
void AllreduceNow(Client& client, const std::string& name, const TensorArg& input,
                  std::uintptr_t output, int op, double prescale, double postscale,
                  int32_t process_set) {
  const TensorView view = ToTensorView(input, Placement{});
  const AllreduceOptions options{.op = ToReduceOp(op),
                                 .prescale = prescale,
                                 .postscale = postscale,
                                 .process_set = process_set};
  absl::Status refused;
  absl::Status failed;
  {
    py::gil_scoped_release release;
    absl::StatusOr<Client::Handle> handle =
        client.AllreduceAsync(name, view, ToPointer(output), options);
    if (handle.ok()) {
      failed = client.Wait(*handle).status();
    } else {
      refused = std::move(handle).status();
    }
  }
  ThrowIfError(std::move(refused), ErrorPhase::kCall);
  ThrowIfError(std::move(failed), ErrorPhase::kWait);
}

// Without outputs the results are views the Python layer copies out (CPU);
// with them (CUDA), the daemon writes every rank's rows there.
Handles Allgather(Client& client, const std::vector<std::string>& names,
                  const std::vector<TensorArg>& inputs, int32_t process_set,
                  const std::vector<std::uintptr_t>& outputs,
                  const std::vector<size_t>& output_bytes, int device, std::uintptr_t cuda_stream) {
  const std::vector<TensorView> views = ToTensorViews(inputs, ToPlacement(device, cuda_stream));
  const std::vector<void*> pointers = ToPointers(outputs);
  py::gil_scoped_release release;
  return ValueOrThrow(
      client.GroupedAllgatherAsync(names, views, pointers, output_bytes, process_set),
      ErrorPhase::kCall);
}

Client::Handle Broadcast(Client& client, const std::string& name, const TensorArg& input,
                         std::uintptr_t output, int root_rank, int32_t process_set, int device,
                         std::uintptr_t cuda_stream) {
  const TensorView view = ToTensorView(input, ToPlacement(device, cuda_stream));
  py::gil_scoped_release release;
  return ValueOrThrow(client.BroadcastAsync(name, view, ToPointer(output), root_rank, process_set),
                      ErrorPhase::kCall);
}

// `output` 0: the result is a view (CPU); otherwise the rows received go
// there (CUDA).
Client::Handle Alltoall(Client& client, const std::string& name, const TensorArg& input,
                        const std::vector<int64_t>& splits, int32_t process_set,
                        std::uintptr_t output, size_t output_bytes, int device,
                        std::uintptr_t cuda_stream) {
  const TensorView view = ToTensorView(input, ToPlacement(device, cuda_stream));
  py::gil_scoped_release release;
  return ValueOrThrow(
      client.AlltoallAsync(name, view, splits, ToPointer(output), output_bytes, process_set),
      ErrorPhase::kCall);
}

}  // namespace

void BindCollectives(py::module_& m) {
  auto client =
      py::reinterpret_borrow<py::class_<Client, std::unique_ptr<Client>>>(m.attr("Client"));
  client
      .def("allreduce_async", &Reduction<&Client::GroupedAllreduceAsync>, py::arg("names"),
           py::arg("inputs"), py::arg("outputs"), py::arg("op"), py::arg("prescale"),
           py::arg("postscale"), py::arg("process_set"), py::arg("device") = 0,
           py::arg("cuda_stream") = 0, py::arg("adasum_scope") = 0,
           "Allreduce of each (address, dtype, shape) input into the output at the same "
           "position; returns one handle per tensor. device: the code of the device every "
           "tensor lies on (DEVICES); cuda_stream: for CUDA, the stream that orders the call; "
           "adasum_scope: with the adasum op, which ranks it combines (ADASUM_SCOPES).")
      .def("allreduce", &AllreduceNow, py::arg("name"), py::arg("input"), py::arg("output"),
           py::arg("op"), py::arg("prescale"), py::arg("postscale"), py::arg("process_set"),
           "Allreduce of one CPU tensor into output (which may be the input), returning once "
           "the result is there; raises as allreduce_async or wait would.")
      .def("allgather_async", &Allgather, py::arg("names"), py::arg("inputs"),
           py::arg("process_set"), py::arg("outputs") = std::vector<std::uintptr_t>{},
           py::arg("output_bytes") = std::vector<size_t>{}, py::arg("device") = 0,
           py::arg("cuda_stream") = 0,
           "Allgather; without outputs wait() returns views of the gathered tensors, with them "
           "(which CUDA tensors need) the gathered rows are written there.")
      .def("broadcast_async", &Broadcast, py::arg("name"), py::arg("input"), py::arg("output"),
           py::arg("root_rank"), py::arg("process_set"), py::arg("device") = 0,
           py::arg("cuda_stream") = 0, "Broadcast from root_rank, counted within the process set.")
      .def("alltoall_async", &Alltoall, py::arg("name"), py::arg("input"), py::arg("splits"),
           py::arg("process_set"), py::arg("output") = 0, py::arg("output_bytes") = 0,
           py::arg("device") = 0, py::arg("cuda_stream") = 0,
           "Alltoall; without an output wait() returns a view of the rows received and their "
           "received_splits; with one (which CUDA tensors need) the rows are written there.")
      .def("reducescatter_async", &Reduction<&Client::GroupedReducescatterAsync>, py::arg("names"),
           py::arg("inputs"), py::arg("outputs"), py::arg("op"), py::arg("prescale"),
           py::arg("postscale"), py::arg("process_set"), py::arg("device") = 0,
           py::arg("cuda_stream") = 0, py::arg("adasum_scope") = 0,
           "Reducescatter into outputs holding this rank's rows.")
      .def(
          "barrier",
          [](Client& self, int32_t process_set) {
            ThrowIfError(self.Barrier(process_set), ErrorPhase::kCall);
          },
          py::arg("process_set"), py::call_guard<py::gil_scoped_release>(),
          "Returns once every rank of the set has reached the barrier.")
      .def(
          "join",
          [](Client& self, int32_t process_set) {
            return ValueOrThrow(self.Join(process_set), ErrorPhase::kCall);
          },
          py::arg("process_set"), py::call_guard<py::gil_scoped_release>(),
          "Horovod's join; returns the last rank to join.");
}

}  // namespace collective::python
