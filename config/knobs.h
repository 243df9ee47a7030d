// The knob table: the one place each configuration knob is declared (name,
// type, default, environment variable, flag, description, validation). The
// loader, --help, --print-config and the test of the shipped YAML are all
// generated from it. Defaults are DaemonConfig's member initialisers.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "config/daemon_config.h"

namespace collective::config {

enum class KnobType {
  kString,
  kPath,
  kEnum,
  kBool,
  kUint32List,
  kUint32,
  kUint64,
  kByteSize,
  kSeconds
};

// "byte size", "list of uint32", ...
absl::string_view KnobTypeName(KnobType type);

struct Knob {
  absl::string_view name;          // snake_case; the YAML key
  absl::string_view section = {};  // heading in --help and in collectived.yaml
  KnobType type;
  absl::string_view description;
  std::string accepts;  // the valid values, for people: "10..60000", "text|json"
  // Parses and validates `text` (a YAML scalar, an environment value or a
  // flag argument) into the knob's field of `config`. The message says only
  // why `text` is wrong; the caller names the knob and the source.
  std::function<absl::Status(absl::string_view text, DaemonConfig& config)> parse;
  // The knob's value in `config` as text that `parse` reads back; byte sizes
  // as plain integers, which scripts reading --print-config expect.
  std::function<std::string(const DaemonConfig& config)> format;
  // The same for people (--help, error messages): byte sizes as "64MiB".
  std::function<std::string(const DaemonConfig& config)> format_readable;

  std::string EnvName() const;   // COLLECTIVED_FUSION_THRESHOLD_BYTES
  std::string FlagName() const;  // --fusion-threshold-bytes (--fusion_threshold_bytes works too)
};

// Every knob, grouped by section, in the order --print-config lists them.
const std::vector<Knob>& Knobs();

// nullptr when no knob has that name.
const Knob* FindKnob(absl::string_view name);

// A rule between knobs, checked once every source is merged, since each side
// may come from a different one.
struct KnobRule {
  std::vector<absl::string_view> knobs;  // the knobs it relates, named in the error
  absl::string_view requirement;         // "default_arena_bytes must not exceed max_arena_bytes"
  std::function<bool(const DaemonConfig& config)> holds;
};

const std::vector<KnobRule>& KnobRules();

}  // namespace collective::config
