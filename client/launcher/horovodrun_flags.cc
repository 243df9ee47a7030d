#include "client/launcher/horovodrun_flags.h"

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"

namespace collective::launcher {
namespace {

constexpr char kGroup[] =
    "horovodrun's tuning flags (set the private collectived's HOROVOD_* variables)";

}  // namespace

void HorovodrunFlags::AddTo(CLI::App& app) {
  // A value flag stores its text under its variable; CLI11 checks the type.
  const auto value = [&](const char* flag, const char* variable, const char* type, const char* help,
                         auto validator) {
    app.add_option_function<std::string>(
           flag, [this, variable](const std::string& given) { values_[variable] = given; }, help)
        ->type_name(type)
        ->check(CLI::Validator(validator).description(""))
        ->group(kGroup);
  };
  const auto on = [&](const char* flag, const char* variable, const char* help) {
    app.add_flag_callback(
           flag, [this, variable] { values_[variable] = "1"; }, help)
        ->group(kGroup);
  };
  const CLI::Range count(int64_t{0}, int64_t{1} << 40);
  value("--fusion-threshold-mb", "HOROVOD_FUSION_THRESHOLD", "MB",
        "fusion buffer threshold in MiB (HOROVOD_FUSION_THRESHOLD)",
        CLI::Range(int64_t{0}, int64_t{1} << 30));
  value("--cycle-time-ms", "HOROVOD_CYCLE_TIME", "MS",
        "cycle time in milliseconds, rounded up to whole ones (HOROVOD_CYCLE_TIME)",
        CLI::PositiveNumber);
  value("--cache-capacity", "HOROVOD_CACHE_CAPACITY", "N",
        "response cache entries; 0 turns the cache off (HOROVOD_CACHE_CAPACITY)", count);
  value("--timeline-filename", "HOROVOD_TIMELINE", "PATH",
        "write the daemon's timeline here (HOROVOD_TIMELINE)", CLI::Validator());
  on("--timeline-mark-cycles", "HOROVOD_TIMELINE_MARK_CYCLES",
     "mark the cycles in the timeline (HOROVOD_TIMELINE_MARK_CYCLES)");
  on("--no-stall-check", "HOROVOD_STALL_CHECK_DISABLE",
     "no stall warnings (HOROVOD_STALL_CHECK_DISABLE)");
  value("--stall-check-warning-time-seconds", "HOROVOD_STALL_CHECK_TIME_SECONDS", "S",
        "warn of a stall after this long (HOROVOD_STALL_CHECK_TIME_SECONDS)", count);
  value("--stall-check-shutdown-time-seconds", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "S",
        "fail a stalled job after this long (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)", count);
  on("--autotune", "HOROVOD_AUTOTUNE", "tune the daemon's knobs online (HOROVOD_AUTOTUNE)");
  value("--autotune-log-file", "HOROVOD_AUTOTUNE_LOG", "PATH",
        "record each autotuning trial here (HOROVOD_AUTOTUNE_LOG)", CLI::Validator());
  value("--autotune-warmup-samples", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "N",
        "samples discarded before tuning (HOROVOD_AUTOTUNE_WARMUP_SAMPLES)", count);
  value("--autotune-steps-per-sample", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "N",
        "steps per tuning sample (HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE)", count);
  value("--autotune-bayes-opt-max-samples", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "N",
        "samples of the Bayesian optimization (HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES)", count);
  value("--log-level", "HOROVOD_LOG_LEVEL", "LEVEL",
        "the daemon's log level: TRACE, DEBUG, INFO, WARNING, ERROR or FATAL (HOROVOD_LOG_LEVEL)",
        CLI::IsMember({"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"}, CLI::ignore_case));
}

std::map<std::string, std::string> HorovodrunFlags::Variables() const {
  std::map<std::string, std::string> variables = values_;
  if (auto it = variables.find("HOROVOD_FUSION_THRESHOLD"); it != variables.end()) {
    it->second = absl::StrCat(std::stoll(it->second) * 1024 * 1024);
  }
  return variables;
}

}  // namespace collective::launcher
