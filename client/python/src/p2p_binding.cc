// Point-to-point messages of collective._core.Client: send_async and
// recv_async (client/client_p2p.cc). Like the collectives, each converts its
// arguments while it holds the GIL, then releases it to submit.
#include <cstdint>

#include <pybind11/stl.h>

#include "bindings.h"
#include "collective/client.h"
#include "errors.h"
#include "tensor_args.h"

namespace collective::python {
namespace {

namespace py = pybind11;

Client::Handle Send(Client& client, const TensorArg& input, int dest, int tag, int32_t process_set,
                    int device, std::uintptr_t cuda_stream) {
  const TensorView view = ToTensorView(input, ToPlacement(device, cuda_stream));
  py::gil_scoped_release release;
  return ValueOrThrow(client.SendAsync(view, dest, tag, process_set), ErrorPhase::kCall);
}

Client::Handle Recv(Client& client, const TensorArg& like, int source, int tag, int32_t process_set,
                    std::uintptr_t output, size_t output_bytes, int device,
                    std::uintptr_t cuda_stream) {
  const TensorView view = ToTensorView(like, ToPlacement(device, cuda_stream));
  py::gil_scoped_release release;
  return ValueOrThrow(
      client.RecvAsync(view, source, tag, process_set, ToPointer(output), output_bytes),
      ErrorPhase::kCall);
}

}  // namespace

void BindPointToPoint(py::module_& m) {
  auto client =
      py::reinterpret_borrow<py::class_<Client, std::unique_ptr<Client>>>(m.attr("Client"));
  client
      .def("send_async", &Send, py::arg("input"), py::arg("dest"), py::arg("tag"),
           py::arg("process_set"), py::arg("device") = 0, py::arg("cuda_stream") = 0,
           "Sends the (address, dtype, shape) input to rank dest of the process set with tag; "
           "it matches dest's receive from this rank with that tag, in order. wait() returns an "
           "empty result once the bytes reached the receiver.")
      .def("recv_async", &Recv, py::arg("like"), py::arg("source"), py::arg("tag"),
           py::arg("process_set"), py::arg("output") = 0, py::arg("output_bytes") = 0,
           py::arg("device") = 0, py::arg("cuda_stream") = 0,
           "Receives from rank source of the process set the message with tag; like's dtype and "
           "shape describe it (its data is not read) and must match the send's dtype and bytes. "
           "Without an output wait() returns a view of the bytes; with one they are written "
           "there.");
}

}  // namespace collective::python
