// HOROVOD_TIMELINE's value as the timeline file it names, read alike by the
// daemon (from its own environment: timeline_file) and by the client library
// (from a rank's: the job's own timeline).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace collective {

// An absolute, lexically normal path, a relative one taken from the working
// directory; empty for DYNAMIC (any case: Horovod's "record only between
// start_timeline and stop_timeline") and for an empty value.
absl::StatusOr<std::string> HorovodTimelinePath(absl::string_view value);

}  // namespace collective
