#include "client/launcher/horovodrun_flags.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace collective::launcher {
namespace {

constexpr char kGroup[] =
    "horovodrun's tuning flags (set the private collectived's HOROVOD_* variables)";

// A scalar of the config file that must be a number (`integer`: a whole
// one) at least 0.
absl::Status CheckNumber(const std::string& key, const std::string& value, bool integer) {
  double number = 0;
  int64_t whole = 0;
  const bool parsed = integer ? absl::SimpleAtoi(value, &whole) : absl::SimpleAtod(value, &number);
  if (!parsed || number < 0 || whole < 0) {
    return absl::InvalidArgumentError(absl::StrCat("horovodrun config file: ", key, " is '", value,
                                                   "', not a ", integer ? "whole " : "",
                                                   "number >= 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Boolean(const std::string& key, const YAML::Node& node) {
  try {
    return node.as<bool>();
  } catch (const YAML::Exception&) {
    return absl::InvalidArgumentError(
        absl::StrCat("horovodrun config file: ", key, " is not true or false"));
  }
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> HorovodrunConfigVariables(
    const std::string& yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& error) {
    return absl::InvalidArgumentError(absl::StrCat("horovodrun config file: ", error.what()));
  }
  std::map<std::string, std::string> variables;
  if (!root.IsDefined() || root.IsNull()) return variables;
  if (!root.IsMap()) {
    return absl::InvalidArgumentError("horovodrun config file: not a map of sections");
  }
  // (section, key, variable, whole number: 1, number: 0, text: -1)
  struct Entry {
    const char* section;
    const char* key;
    const char* variable;
    int kind;
  };
  static constexpr Entry kEntries[] = {
      {"params", "fusion_threshold_mb", "HOROVOD_FUSION_THRESHOLD", 1},
      {"params", "cycle_time_ms", "HOROVOD_CYCLE_TIME", 0},
      {"params", "cache_capacity", "HOROVOD_CACHE_CAPACITY", 1},
      {"autotune", "log_file", "HOROVOD_AUTOTUNE_LOG", -1},
      {"autotune", "warmup_samples", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", 1},
      {"autotune", "steps_per_sample", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 1},
      {"autotune", "bayes_opt_max_samples", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 1},
      {"timeline", "filename", "HOROVOD_TIMELINE", -1},
      {"stall_check", "warning_time_seconds", "HOROVOD_STALL_CHECK_TIME_SECONDS", 1},
      {"stall_check", "shutdown_time_seconds", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", 1},
      {"logging", "level", "HOROVOD_LOG_LEVEL", -1},
  };
  for (const Entry& entry : kEntries) {
    const YAML::Node node = root[entry.section][entry.key];
    if (!node.IsDefined() || node.IsNull()) continue;
    const std::string key = absl::StrCat(entry.section, ".", entry.key);
    if (!node.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat("horovodrun config file: ", key, " is not a single value"));
    }
    const std::string value = node.Scalar();
    if (entry.kind >= 0) {
      if (absl::Status number = CheckNumber(key, value, entry.kind == 1); !number.ok()) {
        return number;
      }
    }
    variables[entry.variable] = value;
  }
  // Switches, as horovodrun exports them: autotune's settings only when it
  // is on, the cycles' marks only with a timeline.
  if (const YAML::Node enabled = root["autotune"]["enabled"]; enabled.IsDefined()) {
    auto on = Boolean("autotune.enabled", enabled);
    if (!on.ok()) return on.status();
    if (*on) variables["HOROVOD_AUTOTUNE"] = "1";
  }
  if (variables.count("HOROVOD_AUTOTUNE") == 0) {
    for (const char* name :
         {"HOROVOD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES",
          "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES"}) {
      variables.erase(name);
    }
  }
  if (const YAML::Node marks = root["timeline"]["mark_cycles"];
      marks.IsDefined() && variables.count("HOROVOD_TIMELINE") > 0) {
    auto on = Boolean("timeline.mark_cycles", marks);
    if (!on.ok()) return on.status();
    variables["HOROVOD_TIMELINE_MARK_CYCLES"] = *on ? "1" : "0";
  }
  if (const YAML::Node enabled = root["stall_check"]["enabled"]; enabled.IsDefined()) {
    auto on = Boolean("stall_check.enabled", enabled);
    if (!on.ok()) return on.status();
    variables["HOROVOD_STALL_CHECK_DISABLE"] = *on ? "0" : "1";
  }
  return variables;
}

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
  // Across nodes every collective is hierarchical here (each node's ranks
  // in shared memory, then the daemons): the switches are taken and set as
  // horovodrun sets them, and change nothing (README, "Horovod's variables").
  on("--hierarchical-allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE",
     "accepted: collectives across nodes are always hierarchical (HOROVOD_HIERARCHICAL_ALLREDUCE)");
  on("--hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER",
     "accepted: collectives across nodes are always hierarchical (HOROVOD_HIERARCHICAL_ALLGATHER)");
  on("--tcp", "NCCL_IB_DISABLE", "TCP only: NCCL leaves InfiniBand alone (NCCL_IB_DISABLE=1)");
  // horovodrun's choice of controller and its cache of host checks have no
  // counterpart: the daemons coordinate the ranks, and collectiverun checks
  // nothing ahead. Taken so that a horovodrun line runs unchanged.
  for (const char* flag : {"--gloo", "--mpi", "--disable-cache"}) {
    app.add_flag_callback(
           flag, [] {}, "accepted from horovodrun: nothing to choose here")
        ->group(kGroup);
  }
  on("--autotune", "HOROVOD_AUTOTUNE", "tune the daemon's knobs online (HOROVOD_AUTOTUNE)");
  value("--autotune-log-file", "HOROVOD_AUTOTUNE_LOG", "PATH",
        "record each autotuning trial here (HOROVOD_AUTOTUNE_LOG)", CLI::Validator());
  value("--autotune-warmup-samples", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "N",
        "samples discarded before tuning (HOROVOD_AUTOTUNE_WARMUP_SAMPLES)", count);
  value("--autotune-steps-per-sample", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "N",
        "steps per tuning sample (HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE)", count);
  value("--autotune-bayes-opt-max-samples", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "N",
        "samples of the Bayesian optimization (HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES)", count);
  app.add_option("--config-file", config_file_,
                 "horovodrun's YAML config file (params, autotune, timeline, stall_check, "
                 "logging); flags override it")
      ->type_name("PATH")
      ->group(kGroup);
  value("--log-level", "HOROVOD_LOG_LEVEL", "LEVEL",
        "the daemon's log level: TRACE, DEBUG, INFO, WARNING, ERROR or FATAL (HOROVOD_LOG_LEVEL)",
        CLI::IsMember({"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"}, CLI::ignore_case));
}

absl::StatusOr<std::map<std::string, std::string>> HorovodrunFlags::Variables() const {
  std::map<std::string, std::string> variables;
  if (!config_file_.empty()) {
    std::ifstream file(config_file_);
    if (!file) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read the horovodrun config file ", config_file_));
    }
    std::stringstream text;
    text << file.rdbuf();
    auto configured = HorovodrunConfigVariables(text.str());
    if (!configured.ok()) return configured.status();
    variables = std::move(*configured);
  }
  for (const auto& [name, given] : values_) variables[name] = given;
  if (auto it = variables.find("HOROVOD_FUSION_THRESHOLD"); it != variables.end()) {
    int64_t megabytes = 0;
    if (!absl::SimpleAtoi(it->second, &megabytes) || megabytes < 0 ||
        megabytes > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fusion_threshold_mb '", it->second, "' is not a number of MiB"));
    }
    it->second = absl::StrCat(megabytes * 1024 * 1024);
  }
  return variables;
}

}  // namespace collective::launcher
