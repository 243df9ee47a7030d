// Horovod's own environment variables for what the daemon decides
// (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME, HOROVOD_TIMELINE, ...), so
// that a job launched with them gets the same settings from the daemon its
// launcher starts (collectiverun's private daemon inherits its environment;
// under mpirun, `-x` passes them). Each maps onto a knob, converted where
// Horovod's unit or form differs. They rank above the YAML file and below
// COLLECTIVED_* variables and flags.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace collective::config {

struct HorovodVariable {
  absl::string_view variable;  // HOROVOD_CYCLE_TIME
  absl::string_view knob;      // cycle_time_ms
  // The knob's text for the variable's `value`; nullopt when the value asks
  // for nothing (HOROVOD_STALL_CHECK_DISABLE=0, HOROVOD_TIMELINE=DYNAMIC).
  // The message of an error says only what is wrong with `value`.
  std::function<absl::StatusOr<std::optional<std::string>>(absl::string_view value)> translate;
};

// In the order they apply: a later one that sets the same knob wins
// (HOROVOD_STALL_CHECK_DISABLE after HOROVOD_STALL_CHECK_TIME_SECONDS).
const std::vector<HorovodVariable>& HorovodVariables();

}  // namespace collective::config
