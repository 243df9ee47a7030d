#include "errors.h"

#include <Python.h>

namespace collective::python {
namespace {

namespace py = pybind11;

// The Python class for an error: argument errors are ValueError whenever
// they are raised, Adasum is NotImplementedError, and anything else (a
// mismatch between ranks, a failed or vanished daemon, a job that ended) is
// HorovodInternalError. FAILED_PRECONDITION is not an argument error here:
// libcollective reports membership as INVALID_ARGUMENT and uses
// FAILED_PRECONDITION for jobs the daemon ended.
py::object ExceptionClass(const StatusError& error) {
  const absl::StatusCode code = error.status().code();
  if (code == absl::StatusCode::kUnimplemented) {
    return py::reinterpret_borrow<py::object>(PyExc_NotImplementedError);
  }
  if (error.phase() == ErrorPhase::kCall &&
      (code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kAlreadyExists ||
       code == absl::StatusCode::kNotFound || code == absl::StatusCode::kOutOfRange)) {
    return py::reinterpret_borrow<py::object>(PyExc_ValueError);
  }
  // Defined in Python so that it pickles and documents like any other
  // class; looked up at raise time, which is rare, rather than cached in a
  // global.
  return py::module_::import("collective.common.exceptions").attr("HorovodInternalError");
}

}  // namespace

void RegisterErrorTranslator() {
  py::register_exception_translator([](std::exception_ptr pointer) {
    if (!pointer) return;
    try {
      std::rethrow_exception(pointer);
    } catch (const StatusError& error) {
      PyErr_SetString(ExceptionClass(error).ptr(), error.what());
    }
  });
}

}  // namespace collective::python
