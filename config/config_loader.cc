#include "config/config_loader.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "config/horovod_environment.h"
#include "config/knobs.h"

namespace collective::config {

struct ConfigLoader::State {
  std::string default_config_path;
  std::string config_path;
  CLI::Option* config_option = nullptr;
  bool print_config = false;
  // One per knob, in table order: CLI11 writes each flag's argument here.
  std::vector<std::string> flag_values;
  std::vector<CLI::Option*> flag_options;
};

namespace {

constexpr absl::string_view kEnvPrefix = "COLLECTIVED_";

// The values merged so far and, for error messages, where each came from:
// "default", "file /etc/collectived/collectived.yaml:12", "env COLLECTIVED_X", "flag --x".
class Merger {
 public:
  Merger() {
    for (const Knob& knob : Knobs()) {
      config_.sources[std::string(knob.name)] = Source::kDefault;
      where_[std::string(knob.name)] = "default";
    }
  }

  absl::Status Set(const Knob& knob, absl::string_view text, Source source, std::string where) {
    if (absl::Status status = knob.parse(text, config_.values); !status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat(knob.name, " (", where, "): ", status.message()));
    }
    config_.sources[std::string(knob.name)] = source;
    where_[std::string(knob.name)] = std::move(where);
    return absl::OkStatus();
  }

  const std::string& Where(absl::string_view name) const { return where_.at(std::string(name)); }
  EffectiveConfig& config() { return config_; }

 private:
  EffectiveConfig config_;
  std::map<std::string, std::string> where_;
};

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The knob whose name is closest to `name`, if close enough to be a typo.
const Knob* ClosestKnob(absl::string_view name) {
  std::string normalized = absl::AsciiStrToLower(name);
  std::replace(normalized.begin(), normalized.end(), '-', '_');
  const Knob* best = nullptr;
  size_t best_distance = std::max<size_t>(2, normalized.size() / 3) + 1;
  // A name cut short (fusion_threshold for fusion_threshold_bytes) is a
  // likelier slip than any edit.
  for (const Knob& knob : Knobs()) {
    if (normalized.size() >= 4 && absl::StartsWith(knob.name, normalized)) return &knob;
  }
  for (const Knob& knob : Knobs()) {
    const size_t distance = EditDistance(normalized, knob.name);
    if (distance < best_distance) {
      best = &knob;
      best_distance = distance;
    }
  }
  return best;
}

std::string UnknownKeyHint(absl::string_view key) {
  if (const Knob* knob = ClosestKnob(key))
    return absl::StrCat("; did you mean '", knob->name, "'?");
  std::vector<absl::string_view> names;
  for (const Knob& knob : Knobs()) names.push_back(knob.name);
  return absl::StrCat(" (knobs: ", absl::StrJoin(names, ", "), ")");
}

std::string UnknownEnvHint(absl::string_view variable) {
  variable.remove_prefix(kEnvPrefix.size());
  if (const Knob* knob = ClosestKnob(variable)) {
    return absl::StrCat("; did you mean ", knob->EnvName(), "?");
  }
  return " (knob NAME is set by COLLECTIVED_NAME; see --help)";
}

const Knob* FindKnobByEnv(absl::string_view variable) {
  for (const Knob& knob : Knobs()) {
    if (knob.EnvName() == variable) return &knob;
  }
  return nullptr;
}

std::string Position(const std::string& path, const YAML::Mark& mark) {
  if (mark.is_null()) return path;
  return absl::StrCat(path, ":", mark.line + 1);
}

absl::string_view NodeKind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "a scalar";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "nothing";
  }
  return "something else";
}

// The YAML value as the text a knob parses; a list knob also takes a YAML
// sequence.
absl::StatusOr<std::string> ValueText(const Knob& knob, const YAML::Node& value) {
  if (value.IsNull()) return std::string();
  if (value.IsScalar()) return value.Scalar();
  if (value.IsSequence() && knob.type == KnobType::kUint32List) {
    std::vector<std::string> items;
    for (const YAML::Node& item : value) {
      if (!item.IsScalar() || absl::StrContains(item.Scalar(), ',')) {
        return absl::InvalidArgumentError("each item of the sequence must be a single number");
      }
      items.push_back(item.Scalar());
    }
    return absl::StrJoin(items, ",");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expected a single value, found ", NodeKind(value)));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, " is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open config file ", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::ErrnoToStatus(errno, absl::StrCat("cannot read config file ", path));
  return text.str();
}

absl::Status ApplyYaml(const std::string& path, const YAML::Node& root, Merger& merger) {
  // An empty file, or one holding only comments, sets nothing.
  if (root.IsNull()) return absl::OkStatus();
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config file ", Position(path, root.Mark()),
                     ": expected a mapping of knob names to values, found ", NodeKind(root)));
  }
  std::map<std::string, std::string> seen;  // knob -> where it was set
  for (const auto& entry : root) {
    const std::string at = Position(path, entry.first.Mark());
    if (!entry.first.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config file ", at, ": expected a knob name, found ", NodeKind(entry.first)));
    }
    const std::string& key = entry.first.Scalar();
    const Knob* knob = FindKnob(key);
    if (knob == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("config file ", at, ": unknown knob '", key, "'", UnknownKeyHint(key)));
    }
    if (const auto [it, inserted] = seen.emplace(key, at); !inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("config file ", at, ": ", key, " is set twice (also at ", it->second, ")"));
    }
    const auto text = ValueText(*knob, entry.second);
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(knob->name, " (file ", at, "): ", text.status().message()));
    }
    RETURN_IF_ERROR(merger.Set(*knob, *text, Source::kFile, absl::StrCat("file ", at)));
  }
  return absl::OkStatus();
}

absl::Status ApplyFile(const std::string& path, Merger& merger) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("config file ", Position(path, e.mark), ": not valid YAML: ", e.msg));
  }
  // Walking the nodes should not throw, but yaml-cpp's accessors may.
  try {
    return ApplyYaml(path, root, merger);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("config file ", Position(path, e.mark), ": ", e.msg));
  }
}

absl::Status ApplyEnvironment(const std::map<std::string, std::string>& environment,
                              Merger& merger) {
  for (const auto& [variable, value] : environment) {
    if (!absl::StartsWith(variable, kEnvPrefix)) continue;
    const Knob* knob = FindKnobByEnv(variable);
    if (knob == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("environment variable ", variable,
                                                     " names no knob", UnknownEnvHint(variable)));
    }
    RETURN_IF_ERROR(merger.Set(*knob, value, Source::kEnvironment, absl::StrCat("env ", variable)));
  }
  return absl::OkStatus();
}

absl::Status ApplyHorovodEnvironment(const std::map<std::string, std::string>& environment,
                                     Merger& merger) {
  for (const HorovodVariable& variable : HorovodVariables()) {
    const auto it = environment.find(std::string(variable.variable));
    if (it == environment.end()) continue;
    const Knob* knob = FindKnob(variable.knob);
    const std::string where = absl::StrCat("env ", variable.variable);
    absl::StatusOr<std::optional<std::string>> text = variable.translate(it->second);
    if (!text.ok()) {
      return absl::Status(text.status().code(),
                          absl::StrCat(knob->name, " (", where, "): ", text.status().message()));
    }
    if (!text->has_value()) continue;
    RETURN_IF_ERROR(merger.Set(*knob, **text, Source::kHorovodEnvironment, where));
    merger.config().horovod_variables[std::string(knob->name)] = std::string(variable.variable);
  }
  return absl::OkStatus();
}

// --config FILE must exist; the default file is read only when it exists.
absl::StatusOr<std::string> ChooseFile(const std::string& given, bool was_given,
                                       const std::string& default_path) {
  const std::string& path = was_given ? given : default_path;
  if (path.empty() && !was_given) return std::string();
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::not_found) {
    if (!was_given) return std::string();
    return absl::NotFoundError(absl::StrCat("--config ", path, ": no such file"));
  }
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot access config file ", path, ": ", error.message()));
  }
  return path;
}

absl::Status CheckRules(Merger& merger) {
  const DaemonConfig& values = merger.config().values;
  for (const KnobRule& rule : KnobRules()) {
    if (rule.holds(values)) continue;
    std::vector<std::string> parts;
    for (const absl::string_view name : rule.knobs) {
      parts.push_back(absl::StrCat(name, " is ", FindKnob(name)->format_readable(values), " (",
                                   merger.Where(name), ")"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(rule.requirement, ": ", absl::StrJoin(parts, ", ")));
  }
  return absl::OkStatus();
}

absl::string_view FlagTypeLabel(const Knob& knob) {
  switch (knob.type) {
    case KnobType::kString:
      return "TEXT";
    case KnobType::kPath:
      return "PATH";
    case KnobType::kEnum:
      return knob.accepts;
    case KnobType::kBool:
      return "BOOL";
    case KnobType::kUint32List:
      return "UINT,...";
    case KnobType::kUint32:
    case KnobType::kUint64:
      return "UINT";
    case KnobType::kByteSize:
      return "BYTES";
    case KnobType::kSeconds:
      return "SECONDS";
  }
  return "VALUE";
}

std::string FlagHelp(const Knob& knob) {
  const DaemonConfig defaults;
  std::string default_text = knob.format_readable(defaults);
  if (default_text.empty()) default_text = "empty";
  return absl::StrCat(knob.description, " [", KnobTypeName(knob.type), ": ", knob.accepts,
                      "; default ", default_text, "; env ", knob.EnvName(), "]");
}

// Double-quoted, so that values such as "yes", "~" or "a: b" stay strings.
std::string QuoteYaml(absl::string_view text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      absl::StrAppend(&quoted, "\\", absl::string_view(&c, 1));
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      absl::StrAppend(&quoted, "\\x", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      quoted.push_back(c);
    }
  }
  quoted.push_back('"');
  return quoted;
}

std::string YamlValue(const Knob& knob, const DaemonConfig& values) {
  switch (knob.type) {
    case KnobType::kString:
    case KnobType::kPath:
      return QuoteYaml(knob.format(values));
    case KnobType::kUint32List:
      return absl::StrCat(
          "[", absl::StrJoin(absl::StrSplit(knob.format(values), ',', absl::SkipEmpty()), ", "),
          "]");
    default:
      return knob.format(values);
  }
}

std::string SourceComment(const Knob& knob, Source source, const EffectiveConfig& config) {
  switch (source) {
    case Source::kDefault:
      return "default";
    case Source::kFile:
      return absl::StrCat("file ", config.file);
    case Source::kHorovodEnvironment:
      return absl::StrCat("env ", config.horovod_variables.at(std::string(knob.name)));
    case Source::kEnvironment:
      return absl::StrCat("env ", knob.EnvName());
    case Source::kFlag:
      return absl::StrCat("flag ", knob.FlagName());
  }
  return "?";
}

}  // namespace

ConfigLoader::ConfigLoader(CLI::App& app, std::string default_config_path)
    : state_(std::make_shared<State>()) {
  state_->default_config_path = std::move(default_config_path);
  const std::string default_note =
      state_->default_config_path.empty()
          ? std::string("none by default")
          : absl::StrCat("default ", state_->default_config_path, " if it exists");
  state_->config_option =
      app.add_option("--config", state_->config_path,
                     absl::StrCat("YAML configuration file (", default_note, ")"))
          ->type_name("FILE");
  app.add_flag("--print-config", state_->print_config,
               "Print the effective configuration, with where each value came from, and exit");

  const std::vector<Knob>& knobs = Knobs();
  // Sized once: CLI11 keeps pointers to the elements.
  state_->flag_values.resize(knobs.size());
  for (size_t i = 0; i < knobs.size(); ++i) {
    const Knob& knob = knobs[i];
    std::string names = knob.FlagName();
    if (absl::StrContains(knob.name, '_')) absl::StrAppend(&names, ",--", knob.name);
    state_->flag_options.push_back(app.add_option(names, state_->flag_values[i], FlagHelp(knob))
                                       ->type_name(std::string(FlagTypeLabel(knob)))
                                       ->group(std::string(knob.section))
                                       ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast));
  }
}

absl::StatusOr<EffectiveConfig> ConfigLoader::Load(
    const std::map<std::string, std::string>& environment) const {
  Merger merger;
  ASSIGN_OR_RETURN(const std::string file,
                   ChooseFile(state_->config_path, state_->config_option->count() > 0,
                              state_->default_config_path));
  if (!file.empty()) {
    RETURN_IF_ERROR(ApplyFile(file, merger));
    merger.config().file = file;
  }
  RETURN_IF_ERROR(ApplyHorovodEnvironment(environment, merger));
  RETURN_IF_ERROR(ApplyEnvironment(environment, merger));
  const std::vector<Knob>& knobs = Knobs();
  for (size_t i = 0; i < knobs.size(); ++i) {
    if (state_->flag_options[i]->count() == 0) continue;
    RETURN_IF_ERROR(merger.Set(knobs[i], state_->flag_values[i], Source::kFlag,
                               absl::StrCat("flag ", knobs[i].FlagName())));
  }
  RETURN_IF_ERROR(CheckRules(merger));
  return std::move(merger.config());
}

bool ConfigLoader::print_config_requested() const { return state_->print_config; }

std::string FormatEffectiveConfig(const EffectiveConfig& config) {
  std::vector<std::pair<std::string, std::string>> lines;  // setting, source
  size_t width = 0;
  for (const Knob& knob : Knobs()) {
    const auto it = config.sources.find(std::string(knob.name));
    const Source source = it == config.sources.end() ? Source::kDefault : it->second;
    lines.emplace_back(absl::StrCat(knob.name, ": ", YamlValue(knob, config.values)),
                       SourceComment(knob, source, config));
    width = std::max(width, lines.back().first.size());
  }
  std::string text = absl::StrCat("# collectived effective configuration; file: ",
                                  config.file.empty() ? "none" : config.file, "\n");
  for (const auto& [setting, source] : lines) {
    absl::StrAppend(&text, setting, std::string(width - setting.size() + 2, ' '), "# ", source,
                    "\n");
  }
  return text;
}

std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> environment;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const absl::string_view text(*entry);
    const size_t equals = text.find('=');
    if (equals == absl::string_view::npos) continue;
    // The first of duplicate names wins, as with getenv().
    environment.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return environment;
}

}  // namespace collective::config
