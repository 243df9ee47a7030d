#include "common/dtype.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace collective {

size_t ElementSize(v1::DataType dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_UINT8:
    case v1::DATA_TYPE_INT8:
    case v1::DATA_TYPE_BOOL:
      return 1;
    case v1::DATA_TYPE_UINT16:
    case v1::DATA_TYPE_INT16:
    case v1::DATA_TYPE_FLOAT16:
    case v1::DATA_TYPE_BFLOAT16:
      return 2;
    case v1::DATA_TYPE_INT32:
    case v1::DATA_TYPE_FLOAT32:
      return 4;
    case v1::DATA_TYPE_INT64:
    case v1::DATA_TYPE_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

bool IsFloatingPoint(v1::DataType dtype) {
  return dtype == v1::DATA_TYPE_FLOAT16 || dtype == v1::DATA_TYPE_BFLOAT16 ||
         dtype == v1::DATA_TYPE_FLOAT32 || dtype == v1::DATA_TYPE_FLOAT64;
}

std::string DataTypeName(v1::DataType dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_UINT8:
      return "uint8";
    case v1::DATA_TYPE_INT8:
      return "int8";
    case v1::DATA_TYPE_UINT16:
      return "uint16";
    case v1::DATA_TYPE_INT16:
      return "int16";
    case v1::DATA_TYPE_INT32:
      return "int32";
    case v1::DATA_TYPE_INT64:
      return "int64";
    case v1::DATA_TYPE_FLOAT16:
      return "float16";
    case v1::DATA_TYPE_BFLOAT16:
      return "bfloat16";
    case v1::DATA_TYPE_FLOAT32:
      return "float32";
    case v1::DATA_TYPE_FLOAT64:
      return "float64";
    case v1::DATA_TYPE_BOOL:
      return "bool";
    case v1::DATA_TYPE_UNSPECIFIED:
      return "unspecified";
    default:
      return absl::StrCat("unknown(", static_cast<int>(dtype), ")");
  }
}

std::string ReduceOpName(v1::ReduceOp op) {
  switch (op) {
    case v1::REDUCE_OP_SUM:
      return "sum";
    case v1::REDUCE_OP_AVERAGE:
      return "average";
    case v1::REDUCE_OP_MIN:
      return "min";
    case v1::REDUCE_OP_MAX:
      return "max";
    case v1::REDUCE_OP_PRODUCT:
      return "product";
    case v1::REDUCE_OP_ADASUM:
      return "adasum";
    case v1::REDUCE_OP_UNSPECIFIED:
      return "unspecified";
    default:
      return absl::StrCat("unknown(", static_cast<int>(op), ")");
  }
}

std::string AdasumScopeName(v1::AdasumScope scope) {
  switch (scope) {
    case v1::ADASUM_SCOPE_RANKS:
      return "ranks";
    case v1::ADASUM_SCOPE_NODES:
      return "nodes";
    default:
      return absl::StrCat("unknown(", static_cast<int>(scope), ")");
  }
}

std::string CollectiveName(v1::Collective collective) {
  switch (collective) {
    case v1::COLLECTIVE_ALLREDUCE:
      return "allreduce";
    case v1::COLLECTIVE_ALLGATHER:
      return "allgather";
    case v1::COLLECTIVE_BROADCAST:
      return "broadcast";
    case v1::COLLECTIVE_ALLTOALL:
      return "alltoall";
    case v1::COLLECTIVE_REDUCESCATTER:
      return "reducescatter";
    case v1::COLLECTIVE_BARRIER:
      return "barrier";
    case v1::COLLECTIVE_JOIN:
      return "join";
    case v1::COLLECTIVE_ADD_PROCESS_SET:
      return "add_process_set";
    case v1::COLLECTIVE_REMOVE_PROCESS_SET:
      return "remove_process_set";
    case v1::COLLECTIVE_REDUCE:
      return "reduce";
    case v1::COLLECTIVE_GATHER:
      return "gather";
    case v1::COLLECTIVE_SCATTER:
      return "scatter";
    case v1::COLLECTIVE_SEND:
      return "send";
    case v1::COLLECTIVE_RECV:
      return "recv";
    case v1::COLLECTIVE_UNSPECIFIED:
      return "unspecified";
    default:
      return absl::StrCat("unknown(", static_cast<int>(collective), ")");
  }
}

}  // namespace collective
