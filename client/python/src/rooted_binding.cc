// The rooted collectives of collective._core.Client: reduce, gather and
// scatter (collective/client.h has their semantics). Like the others, each
// *_async call converts its arguments while it holds the GIL, then releases
// it to submit. An output is an address (0: none, and wait() returns a view
// of the result); a rank that receives nothing gets an empty result.
#include <cstdint>
#include <memory>
#include <string>

#include <pybind11/stl.h>

#include "bindings.h"
#include "collective/client.h"
#include "errors.h"
#include "tensor_args.h"

namespace collective::python {
namespace {

namespace py = pybind11;

Client::Handle Reduce(Client& client, const std::string& name, const TensorArg& input,
                      std::uintptr_t output, int op, double prescale, double postscale,
                      int root_rank, int32_t process_set, int device, std::uintptr_t cuda_stream) {
  const TensorView view = ToTensorView(input, ToPlacement(device, cuda_stream));
  const AllreduceOptions options{.op = ToReduceOp(op),
                                 .prescale = prescale,
                                 .postscale = postscale,
                                 .process_set = process_set};
  py::gil_scoped_release release;
  return ValueOrThrow(client.ReduceAsync(name, view, ToPointer(output), root_rank, options),
                      ErrorPhase::kCall);
}

Client::Handle Gather(Client& client, const std::string& name, const TensorArg& input,
                      int root_rank, int32_t process_set, std::uintptr_t output,
                      size_t output_bytes, int device, std::uintptr_t cuda_stream) {
  const TensorView view = ToTensorView(input, ToPlacement(device, cuda_stream));
  py::gil_scoped_release release;
  return ValueOrThrow(
      client.GatherAsync(name, view, root_rank, process_set, ToPointer(output), output_bytes),
      ErrorPhase::kCall);
}

Client::Handle Scatter(Client& client, const std::string& name, const TensorArg& input,
                       int64_t receive_rows, int root_rank, int32_t process_set,
                       std::uintptr_t output, size_t output_bytes, int device,
                       std::uintptr_t cuda_stream) {
  const TensorView view = ToTensorView(input, ToPlacement(device, cuda_stream));
  py::gil_scoped_release release;
  return ValueOrThrow(client.ScatterAsync(name, view, receive_rows, root_rank, process_set,
                                          ToPointer(output), output_bytes),
                      ErrorPhase::kCall);
}

}  // namespace

void BindRooted(py::module_& m) {
  auto client =
      py::reinterpret_borrow<py::class_<Client, std::unique_ptr<Client>>>(m.attr("Client"));
  client
      .def("reduce_async", &Reduce, py::arg("name"), py::arg("input"), py::arg("output"),
           py::arg("op"), py::arg("prescale"), py::arg("postscale"), py::arg("root_rank"),
           py::arg("process_set"), py::arg("device") = 0, py::arg("cuda_stream") = 0,
           "Reduce to root_rank (counted within the process set), every op but Adasum; output "
           "(an address, or 0 for a view) is used on the root only and may be the input.")
      .def("gather_async", &Gather, py::arg("name"), py::arg("input"), py::arg("root_rank"),
           py::arg("process_set"), py::arg("output") = 0, py::arg("output_bytes") = 0,
           py::arg("device") = 0, py::arg("cuda_stream") = 0,
           "Gather every rank's rows, in rank order, to root_rank; without an output wait() "
           "returns a view (empty on the other ranks).")
      .def("scatter_async", &Scatter, py::arg("name"), py::arg("input"), py::arg("receive_rows"),
           py::arg("root_rank"), py::arg("process_set"), py::arg("output") = 0,
           py::arg("output_bytes") = 0, py::arg("device") = 0, py::arg("cuda_stream") = 0,
           "Scatter root_rank's rows in rank order, this rank receiving receive_rows of them; "
           "a non-root's input is an empty tensor of the same dtype and trailing dimensions.");
}

}  // namespace collective::python
