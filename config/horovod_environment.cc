#include "config/horovod_environment.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/timeline_path.h"
#include "config/knob_values.h"

namespace collective::config {
namespace {

using Translation = absl::StatusOr<std::optional<std::string>>;

Translation AsIs(absl::string_view value) { return std::string(value); }

// Horovod reads its switches as integers (non-zero: on); words work here too.
absl::StatusOr<bool> Switch(absl::string_view value) {
  int64_t number = 0;
  if (absl::SimpleAtoi(value, &number)) return number != 0;
  return ParseBool(value);
}

Translation Flag(absl::string_view value) {
  ASSIGN_OR_RETURN(const bool on, Switch(value));
  return FormatBool(on);
}

// Relative paths are taken from the daemon's working directory, which a
// private daemon shares with its launcher (and so with the script).
Translation AbsolutePath(absl::string_view value) {
  if (value.empty()) return std::nullopt;
  std::error_code error;
  const std::filesystem::path path = std::filesystem::absolute(std::string(value), error);
  if (error) return absl::InvalidArgumentError(absl::StrCat("'", value, "': ", error.message()));
  return path.lexically_normal().string();
}

// Horovod's cycle is a float in milliseconds (0.1 at its fastest); the
// engine's is a whole number of them, and only paces its looks at the other
// daemons while it waits for them with nothing else to do.
Translation WholeMilliseconds(absl::string_view value) {
  double milliseconds = 0;
  if (!absl::SimpleAtod(value, &milliseconds) || !std::isfinite(milliseconds) ||
      milliseconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", value, "' is not a positive number of milliseconds"));
  }
  return absl::StrCat(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(milliseconds))));
}

Translation StallCheckDisable(absl::string_view value) {
  ASSIGN_OR_RETURN(const bool disable, Switch(value));
  if (!disable) return std::nullopt;
  return std::string("0");
}

Translation Timeline(absl::string_view value) {
  ASSIGN_OR_RETURN(std::string path, HorovodTimelinePath(value));
  if (path.empty()) return std::nullopt;  // DYNAMIC: no timeline from start-up
  return path;
}

Translation LogLevel(absl::string_view value) {
  const std::string level = absl::AsciiStrToLower(value);
  for (const auto& [horovod, ours] : {std::pair<const char*, const char*>{"trace", "trace"},
                                      {"debug", "debug"},
                                      {"info", "info"},
                                      {"warning", "warn"},
                                      {"error", "error"},
                                      {"fatal", "critical"}}) {
    if (level == horovod) return std::string(ours);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", value, "' is not one of Horovod's levels (TRACE, DEBUG, INFO, WARNING, ERROR, FATAL)"));
}

std::vector<HorovodVariable> BuildTable() {
  // README "Horovod's variables" says how each maps, for people.
  return {
      {"HOROVOD_FUSION_THRESHOLD", "fusion_threshold_bytes", AsIs},
      {"HOROVOD_CYCLE_TIME", "cycle_time_ms", WholeMilliseconds},
      {"HOROVOD_CACHE_CAPACITY", "response_cache_capacity", AsIs},
      {"HOROVOD_STALL_CHECK_TIME_SECONDS", "stall_check_seconds", AsIs},
      {"HOROVOD_STALL_CHECK_DISABLE", "stall_check_seconds", StallCheckDisable},
      {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "stall_shutdown_seconds", AsIs},
      {"HOROVOD_TIMELINE", "timeline_file", Timeline},
      {"HOROVOD_TIMELINE_MARK_CYCLES", "timeline_mark_cycles", Flag},
      {"HOROVOD_AUTOTUNE", "autotune", Flag},
      {"HOROVOD_AUTOTUNE_LOG", "autotune_log_file", AbsolutePath},
      {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "autotune_warmup_samples", AsIs},
      {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "autotune_steps_per_sample", AsIs},
      {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "autotune_bayes_opt_max_samples", AsIs},
      {"HOROVOD_LOG_LEVEL", "log_level", LogLevel},
  };
}

}  // namespace

const std::vector<HorovodVariable>& HorovodVariables() {
  static const std::vector<HorovodVariable>* const table =
      new std::vector<HorovodVariable>(BuildTable());
  return *table;
}

}  // namespace collective::config
