// Names and sizes of the wire vocabulary (data types, reduce ops,
// collectives), as used in error messages, logs and tables.
#pragma once

#include <cstddef>
#include <string_view>

#include "collective/v1/types.pb.h"

namespace collective {

// Bytes per element; 0 for DATA_TYPE_UNSPECIFIED or a value outside the enum.
size_t ElementSize(v1::DataType dtype);

bool IsFloatingPoint(v1::DataType dtype);

// Short lower-case names: "float32", "sum", "allreduce". Values outside the
// enum print as "unknown(<n>)" so that a bad request can still be described.
std::string DataTypeName(v1::DataType dtype);
std::string ReduceOpName(v1::ReduceOp op);
// "ranks" or "nodes".
std::string AdasumScopeName(v1::AdasumScope scope);
std::string CollectiveName(v1::Collective collective);

// A point-to-point send or receive: matched by ranks and tag, not by name
// (many may be outstanding at once), and between two ranks only.
inline bool IsPointToPoint(v1::Collective collective) {
  return collective == v1::COLLECTIVE_SEND || collective == v1::COLLECTIVE_RECV;
}

}  // namespace collective
