#include "client/launcher/horovodrun_flags.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include "absl/strings/ascii.h"
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

// Drops what horovodrun does not export: autotune's settings unless it is
// on, the cycles' marks without a timeline.
void DropUnexported(std::map<std::string, std::string>& variables) {
  if (auto it = variables.find("HOROVOD_AUTOTUNE"); it == variables.end() || it->second == "0") {
    for (const char* name :
         {"HOROVOD_AUTOTUNE", "HOROVOD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES",
          "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
          "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"}) {
      variables.erase(name);
    }
  }
  if (variables.count("HOROVOD_TIMELINE") == 0) variables.erase("HOROVOD_TIMELINE_MARK_CYCLES");
}

// The settings collectived has no use for, and why: the launcher says so
// once for each one given (HorovodrunFlags::Notes).
struct Inapplicable {
  const char* variable;
  const char* settings;  // the flags and the config file's key that set it
  const char* reason;
};
constexpr Inapplicable kInapplicable[] = {
    {"HOROVOD_HIERARCHICAL_ALLREDUCE",
     "--hierarchical-allreduce/--no-hierarchical-allreduce (params.hierarchical_allreduce)",
     "an allreduce across nodes is always hierarchical here: each node's ranks meet in its "
     "daemon's shared memory, then the daemons reduce among the nodes"},
    {"HOROVOD_HIERARCHICAL_ALLGATHER",
     "--hierarchical-allgather/--no-hierarchical-allgather (params.hierarchical_allgather)",
     "an allgather across nodes is always hierarchical here: each node's ranks meet in its "
     "daemon's shared memory, then the daemons gather among the nodes"},
    {"HOROVOD_TORUS_ALLREDUCE", "--torus-allreduce/--no-torus-allreduce (params.torus_allreduce)",
     "the daemons' step across nodes has no torus variant; it is hierarchical already"},
    {"HOROVOD_NUM_NCCL_STREAMS", "--num-nccl-streams (library_options.num_nccl_streams)",
     "the ranks run no NCCL; the daemon orders its NCCL work on its own streams"},
    {"HOROVOD_THREAD_AFFINITY", "--thread-affinity (library_options.thread_affinity)",
     "it pins Horovod's background thread in each rank, which the ranks do not have; pin "
     "collectived itself (taskset, numactl, systemd's CPUAffinity) instead"},
    {"HOROVOD_GLOO_TIMEOUT_SECONDS",
     "--gloo-timeout-seconds (library_options.gloo_timeout_seconds)",
     "nothing runs Gloo: the daemons coordinate over MPI"},
    {"HOROVOD_MPI_THREADS_DISABLE",
     "--mpi-threads-disable/--no-mpi-threads-disable (library_options.mpi_threads_disable)",
     "the ranks run no MPI; the daemon's one engine thread is its only MPI caller"},
    {"HOROVOD_LOG_HIDE_TIME",
     "--log-with-timestamp/--log-without-timestamp/--log-hide-timestamp (logging.with_timestamp)",
     "the daemon's log lines always carry their time"},
    {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
     "--autotune-gaussian-process-noise (autotune.gaussian_process_noise)",
     "the daemon's autotuner keeps its Gaussian process's own noise level"},
};

// The flags that set no variable, and why they do not apply.
constexpr std::pair<const char*, const char*> kChoices[] = {
    {"--gloo", "the daemons coordinate the ranks; there is no controller to choose"},
    {"--mpi", "the daemons coordinate the ranks; there is no controller to choose"},
    {"--disable-cache", "collectiverun makes no host checks to cache"},
};

// The config file's variables, before DropUnexported: the flags may yet
// turn autotune on or name a timeline.
absl::StatusOr<std::map<std::string, std::string>> RawConfigVariables(const std::string& yaml) {
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
      {"autotune", "gaussian_process_noise", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", 0},
      {"library_options", "num_nccl_streams", "HOROVOD_NUM_NCCL_STREAMS", 1},
      {"library_options", "thread_affinity", "HOROVOD_THREAD_AFFINITY", 1},
      {"library_options", "gloo_timeout_seconds", "HOROVOD_GLOO_TIMEOUT_SECONDS", 1},
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
  // horovodrun's controller: either is taken (nothing to choose here).
  if (const YAML::Node controller = root["controller"]; controller.IsDefined()) {
    const std::string name = controller.IsScalar() ? controller.Scalar() : "";
    if (absl::AsciiStrToLower(name) != "gloo" && absl::AsciiStrToLower(name) != "mpi") {
      return absl::InvalidArgumentError(
          absl::StrCat("horovodrun config file: No such controller supported: ", name));
    }
  }
  // Switches, as horovodrun exports them ("1" or "0"; the inverted ones the
  // other way round).
  struct Switch {
    const char* section;
    const char* key;
    const char* variable;
    bool inverted;
  };
  static constexpr Switch kSwitches[] = {
      {"params", "hierarchical_allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE", false},
      {"params", "hierarchical_allgather", "HOROVOD_HIERARCHICAL_ALLGATHER", false},
      {"params", "torus_allreduce", "HOROVOD_TORUS_ALLREDUCE", false},
      {"autotune", "enabled", "HOROVOD_AUTOTUNE", false},
      {"timeline", "mark_cycles", "HOROVOD_TIMELINE_MARK_CYCLES", false},
      {"stall_check", "enabled", "HOROVOD_STALL_CHECK_DISABLE", true},
      {"library_options", "mpi_threads_disable", "HOROVOD_MPI_THREADS_DISABLE", false},
      {"logging", "with_timestamp", "HOROVOD_LOG_HIDE_TIME", true},
  };
  for (const Switch& entry : kSwitches) {
    const YAML::Node node = root[entry.section][entry.key];
    if (!node.IsDefined() || node.IsNull()) continue;
    auto on = Boolean(absl::StrCat(entry.section, ".", entry.key), node);
    if (!on.ok()) return on.status();
    variables[entry.variable] = *on != entry.inverted ? "1" : "0";
  }
  return variables;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> HorovodrunConfigVariables(
    const std::string& yaml) {
  auto variables = RawConfigVariables(yaml);
  if (variables.ok()) DropUnexported(*variables);
  return variables;
}

void HorovodrunFlags::AddTo(CLI::App& app) {
  // Value flags: each stores its text under its variable; CLI11 checks the
  // type. The library options of Horovod's own threads, which the daemon
  // does not have, are set as horovodrun sets them and change nothing
  // (README, "Horovod's variables").
  struct ValueFlag {
    const char* flag;
    const char* variable;
    const char* type;
    const char* help;
    CLI::Validator check;
  };
  const CLI::Range count(int64_t{0}, int64_t{1} << 40);
  const ValueFlag values[] = {
      {"--fusion-threshold-mb", "HOROVOD_FUSION_THRESHOLD", "MB",
       "fusion buffer threshold in MiB (HOROVOD_FUSION_THRESHOLD)",
       CLI::Range(int64_t{0}, int64_t{1} << 30)},
      {"--cycle-time-ms", "HOROVOD_CYCLE_TIME", "MS",
       "cycle time in milliseconds, rounded up to whole ones (HOROVOD_CYCLE_TIME)",
       CLI::PositiveNumber},
      {"--cache-capacity", "HOROVOD_CACHE_CAPACITY", "N",
       "response cache entries; 0 turns the cache off (HOROVOD_CACHE_CAPACITY)", count},
      {"--timeline-filename", "HOROVOD_TIMELINE", "PATH",
       "write the daemon's timeline here (HOROVOD_TIMELINE)", CLI::Validator()},
      {"--stall-check-warning-time-seconds", "HOROVOD_STALL_CHECK_TIME_SECONDS", "S",
       "warn of a stall after this long (HOROVOD_STALL_CHECK_TIME_SECONDS)", count},
      {"--stall-check-shutdown-time-seconds", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "S",
       "fail a stalled job after this long (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)", count},
      {"--num-nccl-streams", "HOROVOD_NUM_NCCL_STREAMS", "N",
       "accepted: does not apply (HOROVOD_NUM_NCCL_STREAMS)", count},
      {"--thread-affinity", "HOROVOD_THREAD_AFFINITY", "CPU",
       "accepted: changes nothing (HOROVOD_THREAD_AFFINITY)", count},
      {"--gloo-timeout-seconds", "HOROVOD_GLOO_TIMEOUT_SECONDS", "S",
       "accepted: changes nothing (HOROVOD_GLOO_TIMEOUT_SECONDS)", count},
      {"--autotune-log-file", "HOROVOD_AUTOTUNE_LOG", "PATH",
       "record each autotuning trial here (HOROVOD_AUTOTUNE_LOG)", CLI::Validator()},
      {"--autotune-warmup-samples", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "N",
       "samples discarded before tuning (HOROVOD_AUTOTUNE_WARMUP_SAMPLES)", count},
      {"--autotune-steps-per-sample", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "N",
       "steps per tuning sample (HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE)", count},
      {"--autotune-bayes-opt-max-samples", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "N",
       "samples of the Bayesian optimization (HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES)", count},
      {"--autotune-gaussian-process-noise", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "X",
       "accepted: the daemon's Gaussian process keeps its own noise level "
       "(HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE)",
       CLI::NonNegativeNumber},
      {"--log-level", "HOROVOD_LOG_LEVEL", "LEVEL",
       "the daemon's log level: TRACE, DEBUG, INFO, WARNING, ERROR or FATAL (HOROVOD_LOG_LEVEL)",
       CLI::IsMember({"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"}, CLI::ignore_case)},
  };
  for (const ValueFlag& entry : values) {
    app.add_option_function<std::string>(
           entry.flag,
           [this, variable = entry.variable](const std::string& given) {
             values_[variable] = given;
           },
           entry.help)
        ->type_name(entry.type)
        ->check(CLI::Validator(entry.check).description(""))
        ->group(kGroup);
  }

  // Switches: each sets its variable to its value, as horovodrun's do.
  // Across nodes every collective is hierarchical here (each node's ranks
  // in shared memory, then the daemons), and the daemon has none of
  // Horovod's background threads: those switches are taken and change
  // nothing (README, "Horovod's variables").
  struct Switch {
    const char* flag;
    const char* variable;
    const char* value;
    const char* help;
  };
  static constexpr Switch kSwitches[] = {
      {"--timeline-mark-cycles", "HOROVOD_TIMELINE_MARK_CYCLES", "1",
       "mark the cycles in the timeline (HOROVOD_TIMELINE_MARK_CYCLES)"},
      {"--no-timeline-mark-cycles", "HOROVOD_TIMELINE_MARK_CYCLES", "0",
       "do not mark them (the default)"},
      {"--no-stall-check", "HOROVOD_STALL_CHECK_DISABLE", "1",
       "no stall warnings (HOROVOD_STALL_CHECK_DISABLE)"},
      {"--stall-check", "HOROVOD_STALL_CHECK_DISABLE", "0", "stall warnings (the default)"},
      {"--hierarchical-allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE", "1",
       "accepted: collectives across nodes are always hierarchical "
       "(HOROVOD_HIERARCHICAL_ALLREDUCE)"},
      {"--no-hierarchical-allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE", "0",
       "accepted: changes nothing, as above"},
      {"--hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER", "1",
       "accepted: collectives across nodes are always hierarchical "
       "(HOROVOD_HIERARCHICAL_ALLGATHER)"},
      {"--no-hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER", "0",
       "accepted: changes nothing, as above"},
      {"--torus-allreduce", "HOROVOD_TORUS_ALLREDUCE", "1",
       "accepted: changes nothing, as above (HOROVOD_TORUS_ALLREDUCE)"},
      {"--no-torus-allreduce", "HOROVOD_TORUS_ALLREDUCE", "0",
       "accepted: changes nothing, as above"},
      {"--tcp", "NCCL_IB_DISABLE", "1",
       "TCP only: NCCL leaves InfiniBand alone (NCCL_IB_DISABLE=1)"},
      {"--mpi-threads-disable", "HOROVOD_MPI_THREADS_DISABLE", "1",
       "accepted: changes nothing (HOROVOD_MPI_THREADS_DISABLE)"},
      {"--no-mpi-threads-disable", "HOROVOD_MPI_THREADS_DISABLE", "0", "accepted: changes nothing"},
      {"--log-with-timestamp", "HOROVOD_LOG_HIDE_TIME", "0",
       "accepted: the daemon's log lines always carry their time (HOROVOD_LOG_HIDE_TIME)"},
      {"--log-without-timestamp", "HOROVOD_LOG_HIDE_TIME", "1", "accepted: changes nothing"},
      {"--log-hide-timestamp", "HOROVOD_LOG_HIDE_TIME", "1",
       "accepted: changes nothing (horovodrun's older name)"},
      {"--no-log-hide-timestamp", "HOROVOD_LOG_HIDE_TIME", "0",
       "accepted: changes nothing (horovodrun's older name)"},
      {"--autotune", "HOROVOD_AUTOTUNE", "1", "tune the daemon's knobs online (HOROVOD_AUTOTUNE)"},
      {"--no-autotune", "HOROVOD_AUTOTUNE", "0", "no tuning (the default)"},
  };
  for (const Switch& entry : kSwitches) {
    app.add_flag_callback(
           entry.flag, [this, entry] { values_[entry.variable] = entry.value; }, entry.help)
        ->group(kGroup);
  }
  // horovodrun's choice of controller and its cache of host checks have no
  // counterpart (kChoices). Taken so that a horovodrun line runs unchanged,
  // and noted.
  for (const auto& [flag, reason] : kChoices) {
    app.add_flag_callback(
           flag, [this, flag = std::string(flag)] { choices_.insert(flag); },
           absl::StrCat("accepted from horovodrun: does not apply (", reason, ")"))
        ->group(kGroup);
  }
  app.add_flag_callback(
         "--jsrun", [this] { jsrun_ = true; },
         "refused: collectiverun starts the ranks itself, or through mpirun across machines")
      ->group(kGroup);
  app.add_option("--config-file", config_file_,
                 "horovodrun's YAML config file (params, autotune, timeline, stall_check, "
                 "logging); flags override it")
      ->type_name("PATH")
      ->group(kGroup);
}

absl::StatusOr<std::map<std::string, std::string>> HorovodrunFlags::Variables() {
  std::map<std::string, std::string> variables;
  if (!config_file_.empty()) {
    std::ifstream file(config_file_);
    if (!file) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read the horovodrun config file ", config_file_));
    }
    std::stringstream text;
    text << file.rdbuf();
    auto configured = RawConfigVariables(text.str());
    if (!configured.ok()) return configured.status();
    variables = std::move(*configured);
  }
  if (jsrun_) {
    return absl::InvalidArgumentError(
        "--jsrun: collectiverun starts the ranks itself (across machines through mpirun); it "
        "does not run them with jsrun");
  }
  // The flags over the file, then what horovodrun exports of both.
  for (const auto& [name, given] : values_) variables[name] = given;
  notes_.clear();
  for (const auto& [flag, reason] : kChoices) {
    if (choices_.count(flag) > 0) notes_.push_back(absl::StrCat(flag, " does not apply: ", reason));
  }
  for (const Inapplicable& entry : kInapplicable) {
    if (variables.count(entry.variable) > 0) {
      notes_.push_back(absl::StrCat(entry.settings, " does not apply: ", entry.reason));
    }
  }
  DropUnexported(variables);
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
