// collective._core: the Python binding of libcollective. It knows nothing
// of PyTorch: tensors arrive as (address, dtype code, shape), so one build
// serves every PyTorch version; collective.torch turns tensors into those.
#include <string>
#include <utility>

#include <pybind11/pybind11.h>

#include "bindings.h"
#include "collective/client.h"
#include "common/duplicate_name.h"
#include "errors.h"

namespace {

namespace py = pybind11;
using collective::DataType;
using collective::ReduceOp;

constexpr std::pair<const char*, DataType> kDataTypes[] = {
    {"uint8", DataType::kUInt8},     {"int8", DataType::kInt8},
    {"uint16", DataType::kUInt16},   {"int16", DataType::kInt16},
    {"int32", DataType::kInt32},     {"int64", DataType::kInt64},
    {"float16", DataType::kFloat16}, {"bfloat16", DataType::kBFloat16},
    {"float32", DataType::kFloat32}, {"float64", DataType::kFloat64},
    {"bool", DataType::kBool}};

constexpr std::pair<const char*, ReduceOp> kReduceOps[] = {
    {"sum", ReduceOp::kSum}, {"average", ReduceOp::kAverage}, {"min", ReduceOp::kMin},
    {"max", ReduceOp::kMax}, {"product", ReduceOp::kProduct}, {"adasum", ReduceOp::kAdasum}};

constexpr std::pair<const char*, collective::AdasumScope> kAdasumScopes[] = {
    {"ranks", collective::AdasumScope::kRanks}, {"nodes", collective::AdasumScope::kNodes}};

constexpr std::pair<const char*, collective::Device> kDevices[] = {
    {"cpu", collective::Device::kCpu}, {"cuda", collective::Device::kCuda}};

// None when this process can hand CUDA tensors to a daemon that takes them;
// otherwise why not (no NVIDIA driver, or one too old).
py::object CudaDriverError() {
  const absl::Status status = collective::Client::CudaDriverStatus();
  if (status.ok()) return py::none();
  return py::str(std::string(status.message()));
}

// name -> wire code, so that the Python layer never hard-codes the codes.
template <typename Enum, size_t N>
py::dict Codes(const std::pair<const char*, Enum> (&table)[N]) {
  py::dict codes;
  for (const auto& [name, value] : table) codes[name] = static_cast<int>(value);
  return codes;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Python binding of libcollective, the client of collectived.";
  m.attr("__version__") = COLLECTIVE_PYTHON_VERSION;
  collective::python::RegisterErrorTranslator();
  collective::python::BindResult(m);
  collective::python::BindClient(m);
  collective::python::BindCollectives(m);
  collective::python::BindBuffer(m);
  collective::python::BindRooted(m);
  collective::python::BindPointToPoint(m);
  m.attr("DTYPES") = Codes(kDataTypes);
  m.attr("REDUCE_OPS") = Codes(kReduceOps);
  m.attr("ADASUM_SCOPES") = Codes(kAdasumScopes);
  m.attr("DEVICES") = Codes(kDevices);
  m.def("cuda_driver_error", &CudaDriverError,
        "None when libcollective can load the NVIDIA driver (libcuda.so.1) with every function "
        "it uses for CUDA tensors; otherwise the reason it cannot.");
  m.attr("GLOBAL_PROCESS_SET") = collective::kGlobalProcessSet;
  // Horovod's text for a name already in use, which collective.torch raises
  // itself (it holds names until synchronize).
  m.attr("DUPLICATE_NAME_ERROR") = std::string(collective::kHorovodDuplicateNameText);
  // What this build's daemon was built with, known before any daemon is
  // reached: Horovod's nccl_built() answers before init().
  m.attr("NCCL_VERSION_CODE") = COLLECTIVE_NCCL_VERSION_CODE;
}
