// The JSON of one Trace Event Format event (the format chrome://tracing and
// Perfetto load), appended to a string. Only what the timeline needs: a
// name, a phase, pid and tid, optional timestamp, duration and scope, and
// integer or string args. Formatting only: no I/O, no state beyond the event.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace collective::daemon::observe {

// Appends `text` as a quoted JSON string. Quotes, backslashes and control
// characters are escaped; bytes that are not valid UTF-8 become U+FFFD, so
// the file stays valid JSON whatever a name holds.
void AppendJsonString(std::string& out, absl::string_view text);

// Appends nanoseconds as microseconds with three decimals ("12.345"): the
// unit of "ts" and "dur", exact to the nanosecond (no floating point).
void AppendMicros(std::string& out, uint64_t nanos);

// Builds one event in place:
//   TraceEvent(out, "REDUCE", "X", pid, 0).Time(ts).Duration(d).Arg("bytes", n).Close();
// Fields must come in this order: Time, Duration, Scope, then Args; Close
// once at the end.
class TraceEvent {
 public:
  TraceEvent(std::string& out, absl::string_view name, absl::string_view phase, int64_t pid,
             int64_t tid);

  TraceEvent& Time(uint64_t nanos);            // "ts"
  TraceEvent& Duration(uint64_t nanos);        // "dur"
  TraceEvent& Scope(absl::string_view scope);  // "s" of instant events: "g", "p" or "t"

  template <std::integral T>
  TraceEvent& Arg(absl::string_view key, T value) {
    BeginArg(key);
    absl::StrAppend(&out_, value);
    return *this;
  }
  TraceEvent& Arg(absl::string_view key, absl::string_view value);

  void Close();

 private:
  void BeginArg(absl::string_view key);

  std::string& out_;
  bool has_args_ = false;
};

}  // namespace collective::daemon::observe
