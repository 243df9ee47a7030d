// The text every rank of a job must receive when the worker's mismatch
// scenario (collectives_worker_errors.cc) makes the last rank deviate: shared
// by the single-node and multi-node error tests.
#pragma once

#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"

namespace collective::testing {

struct MismatchParam {
  std::string collective;
  std::string kind;
  int clients;
};

inline void PrintTo(const MismatchParam& param, std::ostream* out) {
  *out << param.collective << " " << param.kind << " with " << param.clients << " clients";
}

// The error every rank must receive for 'bad' when the last rank deviates in
// `kind` (see the worker's mismatch scenario: rank 0 sends float32, sum,
// scale factors 1, root 0; [6] for allreduce and broadcast, [1, 3] for
// allgather, [2 * size, 3] for alltoall and reducescatter).
inline std::string ExpectedMismatch(const MismatchParam& p, const std::string& name = "bad") {
  const int last = p.clients - 1;
  const std::string rows = absl::StrCat(2 * p.clients);
  std::string what, first, odd, why;
  if (p.kind == "dtype") {
    what = "data types";
    first = "float32";
    odd = "int32";
  } else if (p.kind == "shape" || p.kind == "rank") {
    what = p.collective + " tensor shapes";
    if (p.collective == "allreduce" || p.collective == "broadcast") {
      first = "[6]";
      odd = "[2, 3]";
    } else if (p.collective == "allgather") {
      first = "[1, 3]";
      odd = p.kind == "rank" ? absl::StrCat("[", 3 * p.clients, "]")
                             : absl::StrCat("[", p.clients, ", 4]");
    } else {
      first = absl::StrCat("[", rows, ", 3]");
      odd = p.kind == "rank" ? absl::StrCat("[", 6 * p.clients, "]") : "[" + rows + ", 4]";
    }
    if (p.collective == "allgather" || p.collective == "alltoall") {
      why = " (every dimension but the first must match)";
    }
  } else if (p.kind == "op") {
    what = "reduce ops";
    first = "sum";
    odd = p.collective == "allreduce" ? "max" : "average";
  } else if (p.kind == "prescale" || p.kind == "postscale") {
    what = p.kind + " factors";
    first = "1";
    odd = p.kind == "prescale" ? "0.5" : "3";
  } else if (p.kind == "root") {
    what = "broadcast root ranks";
    first = "0";
    odd = "1";
  } else if (p.kind == "group") {
    what = "groups";
    first = "it alone";
    odd = "it in a group of 2 tensors";
  } else if (p.kind == "collective") {
    what = "collective operations";
    first = p.collective;
    odd = "allgather";
  }
  return absl::StrCat("error: FAILED_PRECONDITION: Mismatched ", what, " for '", name,
                      "': rank 0 sent ", first, ", rank ", last, " sent ", odd, why, "\n");
}

}  // namespace collective::testing
