// Named spdlog loggers, one per subsystem, sharing one stderr sink (journald
// and container runtimes collect stderr). Text or JSON lines.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// fmt (and so spdlog) prints absl::string_view and absl::Status as text.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  auto format(absl::string_view text, fmt::format_context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(text.data(), text.size()),
                                                    ctx);
  }
};
template <>
struct fmt::formatter<absl::Status> : fmt::formatter<fmt::string_view> {
  auto format(const absl::Status& status, fmt::format_context& ctx) const {
    const std::string text = status.ToString();
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(text), ctx);
  }
};

namespace collective::log {

enum class Subsystem { kDaemon, kRpc, kShm, kCoord, kExec, kMpi, kNccl, kCfg, kClient, kBench };
inline constexpr int kSubsystemCount = 10;

absl::string_view SubsystemName(Subsystem subsystem);

enum class Format { kText, kJson };

// "info" or "info,coord=debug,rpc=trace": a default level and per-subsystem
// overrides. Levels: trace, debug, info, warn, error, critical, off.
struct LevelSpec {
  spdlog::level::level_enum default_level = spdlog::level::info;
  std::map<Subsystem, spdlog::level::level_enum> overrides;
};
absl::StatusOr<LevelSpec> ParseLevelSpec(absl::string_view spec);

// Applies format and levels to every subsystem logger, and with
// `priority_prefix` starts each line with its syslog priority ("<3>", as
// sd-daemon(3) describes) for journald. Call before threads start logging
// (it swaps formatters).
void Configure(const LevelSpec& levels, Format format, bool priority_prefix = false);

// The syslog priority of a level: critical 2, error 3, warn 4, info 6,
// debug and trace 7.
int SyslogPriority(spdlog::level::level_enum level);

spdlog::logger& Get(Subsystem subsystem);

// Who the lines logged in a scope are about: the JSON format's "rank" and
// "tensor" fields (null outside such a scope), so that a log collector can
// select one rank's or one tensor's lines without parsing messages. Held per
// thread: the sink is synchronous, so lines are formatted on the thread that
// logs them. Scopes nest; the inner one wins until it ends.
struct Context {
  std::optional<int64_t> rank;  // global rank
  absl::string_view tensor;     // must outlive the scope
};

class ScopedContext {
 public:
  explicit ScopedContext(Context context);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  const Context* previous_;
  Context context_;
};

inline spdlog::logger& Daemon() { return Get(Subsystem::kDaemon); }
inline spdlog::logger& Rpc() { return Get(Subsystem::kRpc); }
inline spdlog::logger& Shm() { return Get(Subsystem::kShm); }
inline spdlog::logger& Coord() { return Get(Subsystem::kCoord); }
inline spdlog::logger& Exec() { return Get(Subsystem::kExec); }
inline spdlog::logger& Mpi() { return Get(Subsystem::kMpi); }
inline spdlog::logger& Nccl() { return Get(Subsystem::kNccl); }
inline spdlog::logger& Cfg() { return Get(Subsystem::kCfg); }
inline spdlog::logger& Client() { return Get(Subsystem::kClient); }
inline spdlog::logger& Bench() { return Get(Subsystem::kBench); }

}  // namespace collective::log
