// Loads the daemon's configuration: defaults < YAML file < COLLECTIVED_*
// environment variables < command-line flags.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "absl/status/statusor.h"
#include "config/daemon_config.h"

namespace collective::config {

inline constexpr char kDefaultConfigPath[] = "/etc/collectived/collectived.yaml";

class ConfigLoader {
 public:
  // Declares on `app`: --config FILE, --print-config, and one flag per knob
  // (--socket, --fusion-threshold-bytes, ...). `default_config_path` is read
  // when --config is not given and the file exists.
  explicit ConfigLoader(CLI::App& app, std::string default_config_path = kDefaultConfigPath);

  // Call after app.parse(). `environment` is the process environment (see
  // ProcessEnvironment); only COLLECTIVED_* entries are looked at, and an
  // unknown COLLECTIVED_* name is an error. Every error names the knob, the
  // source and the reason.
  absl::StatusOr<EffectiveConfig> Load(const std::map<std::string, std::string>& environment) const;

  bool print_config_requested() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// The effective values as YAML that the daemon accepts back, one line per
// knob in table order, each commented with its source, after a header line
// naming the file:
//   fusion_threshold_bytes: 1048576  # env COLLECTIVED_FUSION_THRESHOLD_BYTES
std::string FormatEffectiveConfig(const EffectiveConfig& config);

// The process environment; the only place in the daemon that reads it.
std::map<std::string, std::string> ProcessEnvironment();

}  // namespace collective::config
