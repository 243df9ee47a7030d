#include "common/logging.h"

#include <array>
#include <iterator>
#include <memory>
#include <string>
#include <utility>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace collective::log {
namespace {

constexpr std::array<absl::string_view, kSubsystemCount> kNames = {
    "daemon", "rpc", "shm", "coord", "exec", "mpi", "nccl", "cfg", "client", "bench"};

// The innermost ScopedContext of this thread. Per thread by nature (like
// errno): a scope describes what its own thread is doing.
thread_local const Context* current_context = nullptr;

// `text` as the inside of a JSON string.
void AppendJsonEscaped(absl::string_view text, spdlog::memory_buf_t& dest) {
  auto append = [&dest](absl::string_view part) {
    dest.append(part.data(), part.data() + part.size());
  };
  for (char c : text) {
    switch (c) {
      case '"':
        append("\\\"");
        break;
      case '\\':
        append("\\\\");
        break;
      case '\n':
        append("\\n");
        break;
      case '\r':
        append("\\r");
        break;
      case '\t':
        append("\\t");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          append(fmt::format("\\u{:04x}", static_cast<unsigned>(c)));
        } else {
          dest.push_back(c);
        }
    }
  }
}

void AppendNull(spdlog::memory_buf_t& dest) {
  constexpr absl::string_view kNull = "null";
  dest.append(kNull.data(), kNull.data() + kNull.size());
}

// A custom pattern flag; spdlog copies formatters through clone().
template <class Flag>
class ClonableFlag : public spdlog::custom_flag_formatter {
 public:
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<Flag>(); }
};

// %j: the message, escaped for a JSON string.
class JsonMessageFlag final : public ClonableFlag<JsonMessageFlag> {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    AppendJsonEscaped(absl::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
};

// %R: the context's rank, or null.
class JsonRankFlag final : public ClonableFlag<JsonRankFlag> {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    if (current_context == nullptr || !current_context->rank.has_value()) return AppendNull(dest);
    fmt::format_to(std::back_inserter(dest), "{}", *current_context->rank);
  }
};

// %T: the context's tensor as a JSON string, or null.
class JsonTensorFlag final : public ClonableFlag<JsonTensorFlag> {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    if (current_context == nullptr || current_context->tensor.empty()) return AppendNull(dest);
    dest.push_back('"');
    AppendJsonEscaped(current_context->tensor, dest);
    dest.push_back('"');
  }
};

// %p: the line's syslog priority as sd-daemon(3) prefixes it ("<3>"), which
// journald strips from the message and stores as the entry's PRIORITY.
class PriorityFlag final : public ClonableFlag<PriorityFlag> {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    fmt::format_to(std::back_inserter(dest), "<{}>", SyslogPriority(msg.level));
  }
};

std::unique_ptr<spdlog::formatter> MakeFormatter(Format format, bool priority_prefix) {
  const std::string prefix = priority_prefix ? "%p" : "";
  if (format == Format::kText) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<PriorityFlag>('p').set_pattern(prefix +
                                                       "%Y-%m-%d %H:%M:%S.%e %^%L%$ %n: %v");
    return formatter;
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  // The field names are a contract with log collectors (README, "Logs").
  formatter->add_flag<JsonMessageFlag>('j')
      .add_flag<JsonRankFlag>('R')
      .add_flag<JsonTensorFlag>('T')
      .add_flag<PriorityFlag>('p')
      .set_pattern(
          prefix +
          R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","subsystem":"%n","rank":%R,"tensor":%T,)"
          R"("msg":"%j","pid":%P})");
  return formatter;
}

// The loggers exist once per process; spdlog's registry is not used so that
// a host application's own spdlog setup is left alone.
std::array<std::shared_ptr<spdlog::logger>, kSubsystemCount>& Loggers() {
  static auto* loggers = [] {
    auto* all = new std::array<std::shared_ptr<spdlog::logger>, kSubsystemCount>();
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    sink->set_formatter(MakeFormatter(Format::kText, false));
    for (int i = 0; i < kSubsystemCount; ++i) {
      (*all)[i] = std::make_shared<spdlog::logger>(std::string(kNames[i]), sink);
      (*all)[i]->set_level(spdlog::level::info);
    }
    return all;
  }();
  return *loggers;
}

absl::StatusOr<spdlog::level::level_enum> ParseLevel(absl::string_view text) {
  for (int level = spdlog::level::trace; level <= spdlog::level::off; ++level) {
    const auto name = spdlog::level::to_string_view(static_cast<spdlog::level::level_enum>(level));
    if (text == absl::string_view(name.data(), name.size())) {
      return static_cast<spdlog::level::level_enum>(level);
    }
  }
  if (text == "warn" || text == "warning") return spdlog::level::warn;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level '", text, "' (use trace, debug, info, warn, error, critical or off)"));
}

}  // namespace

ScopedContext::ScopedContext(Context context)
    : previous_(current_context), context_(std::move(context)) {
  current_context = &context_;
}

ScopedContext::~ScopedContext() { current_context = previous_; }

absl::string_view SubsystemName(Subsystem subsystem) { return kNames[static_cast<int>(subsystem)]; }

absl::StatusOr<LevelSpec> ParseLevelSpec(absl::string_view spec) {
  LevelSpec result;
  bool have_default = false;
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) {
      if (have_default) {
        return absl::InvalidArgumentError(
            absl::StrCat("log level spec '", spec, "' names more than one default level"));
      }
      auto level = ParseLevel(part);
      if (!level.ok()) return level.status();
      result.default_level = *level;
      have_default = true;
      continue;
    }
    const absl::string_view name = absl::StripAsciiWhitespace(part.substr(0, eq));
    auto level = ParseLevel(absl::StripAsciiWhitespace(part.substr(eq + 1)));
    if (!level.ok()) return level.status();
    bool found = false;
    for (int i = 0; i < kSubsystemCount; ++i) {
      if (kNames[i] == name) {
        result.overrides[static_cast<Subsystem>(i)] = *level;
        found = true;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown subsystem '", name,
          "' in log level spec (subsystems: daemon, rpc, shm, coord, exec, mpi, nccl, cfg, "
          "client, bench)"));
    }
  }
  return result;
}

int SyslogPriority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical:
      return 2;  // LOG_CRIT
    case spdlog::level::err:
      return 3;  // LOG_ERR
    case spdlog::level::warn:
      return 4;  // LOG_WARNING
    case spdlog::level::info:
      return 6;  // LOG_INFO
    default:
      return 7;  // LOG_DEBUG (trace too)
  }
}

void Configure(const LevelSpec& levels, Format format, bool priority_prefix) {
  auto& loggers = Loggers();
  // All loggers share one sink; set its formatter once.
  loggers[0]->sinks().front()->set_formatter(MakeFormatter(format, priority_prefix));
  for (int i = 0; i < kSubsystemCount; ++i) {
    const auto it = levels.overrides.find(static_cast<Subsystem>(i));
    loggers[i]->set_level(it == levels.overrides.end() ? levels.default_level : it->second);
  }
}

spdlog::logger& Get(Subsystem subsystem) { return *Loggers()[static_cast<int>(subsystem)]; }

}  // namespace collective::log
