// Reads a timeline file (Chrome Trace Event Format, JSON array form) with
// protobuf's strict JSON parser: a file that loads here is a JSON array that
// chrome://tracing and Perfetto load.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/struct.pb.h>

#include "absl/status/statusor.h"

namespace collective::testing {

// One event of the file, as a JSON parser read it; absent numbers are -1.
struct TraceEvent {
  std::string name;
  std::string ph;
  std::string scope;  // "s"
  int64_t pid = -1;
  int64_t tid = -1;
  double ts = -1;
  double dur = -1;
  google::protobuf::Struct args;

  double NumberArg(const std::string& key) const;
  std::string StringArg(const std::string& key) const;
};

// The events of the file at `path`, in file order; INVALID_ARGUMENT (with
// the parser's reason) when it is not a JSON array of objects.
absl::StatusOr<std::vector<TraceEvent>> ReadTrace(const std::string& path);

// The events named `name` with phase `ph` (and process `pid` unless -1).
std::vector<TraceEvent> SelectEvents(const std::vector<TraceEvent>& events, const std::string& name,
                                     const std::string& ph, int64_t pid = -1);

// Tensor name -> pid, from the process_name metadata, in file order.
std::vector<std::pair<std::string, int64_t>> TraceProcesses(const std::vector<TraceEvent>& events);

}  // namespace collective::testing
