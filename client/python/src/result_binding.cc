// collective._core.Result: the outcome of one request. For allgather and
// alltoall it is a read-only view of the daemon's result segment; the Python
// layer allocates a tensor of result.shape, copies the bytes into it with
// copy_to and releases the view, so that the daemon can reuse the space.
#include <cstring>
#include <memory>

#include <pybind11/stl.h>

#include "absl/strings/str_cat.h"
#include "bindings.h"
#include "collective/client.h"
#include "errors.h"
#include "tensor_args.h"

namespace collective::python {
namespace {

namespace py = pybind11;

void CopyTo(const Result& result, std::uintptr_t address, size_t capacity) {
  if (result.bytes() == 0) return;  // an empty tensor may have no storage at all
  if (result.data() == nullptr) {
    throw StatusError(absl::FailedPreconditionError("the result was released already"),
                      ErrorPhase::kCall);
  }
  if (capacity < result.bytes()) {
    throw StatusError(
        absl::InvalidArgumentError(absl::StrCat("the result has ", result.bytes(),
                                                " bytes; the destination holds ", capacity)),
        ErrorPhase::kCall);
  }
  void* destination = ToPointer(address);
  // Large gathers take a while to copy; other Python threads may run.
  py::gil_scoped_release release;
  std::memcpy(destination, result.data(), result.bytes());
}

}  // namespace

void BindResult(py::module_& m) {
  py::class_<Result, std::unique_ptr<Result>>(
      m, "Result", "The outcome of one request (see collective::Result).")
      .def_property_readonly("shape", &Result::shape)
      .def_property_readonly("dtype", [](const Result& r) { return static_cast<int>(r.dtype()); })
      .def_property_readonly("nbytes", &Result::bytes)
      .def_property_readonly("received_splits", &Result::received_splits)
      .def("copy_to", &CopyTo, py::arg("address"), py::arg("capacity"),
           "Copies the result's bytes to `address`, which holds `capacity` bytes.")
      .def("release", &Result::Release, "Ends a view early; the daemon may then reuse the memory.");
}

}  // namespace collective::python
