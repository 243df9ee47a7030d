// The pieces of the collective._core module, one per file.
#pragma once

#include <pybind11/pybind11.h>

namespace collective::python {

void BindResult(pybind11::module_& m);        // result_binding.cc
void BindClient(pybind11::module_& m);        // client_binding.cc
void BindCollectives(pybind11::module_& m);   // collectives_binding.cc, after BindClient
void BindBuffer(pybind11::module_& m);        // buffer_binding.cc, after BindClient
void BindPointToPoint(pybind11::module_& m);  // p2p_binding.cc, after BindClient
void BindRooted(pybind11::module_& m);        // rooted_binding.cc, after BindClient

}  // namespace collective::python
