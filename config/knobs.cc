#include "config/knobs.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include <sys/un.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "config/knob_values.h"

namespace collective::config {
namespace {

template <typename T>
using Field = T DaemonConfig::*;

using TextCheck = absl::Status (*)(absl::string_view text);

// "low..high", or ">= low" when only the type bounds it.
std::string RangeText(const std::string& low, const std::string& high, bool unbounded) {
  return unbounded ? absl::StrCat(">= ", low) : absl::StrCat(low, "..", high);
}

absl::Status OutOfRange(absl::string_view text, bool too_low, const std::string& limit) {
  return absl::InvalidArgumentError(absl::StrCat(
      "'", text, "' is ", too_low ? "below the minimum " : "above the maximum ", limit));
}

Knob Text(absl::string_view name, Field<std::string> field, KnobType type, TextCheck check,
          std::string accepts, absl::string_view description) {
  auto format = [field](const DaemonConfig& config) { return config.*field; };
  return Knob{
      .name = name,
      .type = type,
      .description = description,
      .accepts = std::move(accepts),
      .parse = [field, check](absl::string_view text, DaemonConfig& config) -> absl::Status {
        RETURN_IF_ERROR(check(text));
        config.*field = std::string(text);
        return absl::OkStatus();
      },
      .format = format,
      .format_readable = format,
  };
}

template <typename E>
Knob Enum(absl::string_view name, Field<E> field,
          std::vector<std::pair<absl::string_view, E>> names, absl::string_view description) {
  std::vector<absl::string_view> spellings;
  for (const auto& entry : names) spellings.push_back(entry.first);
  auto format = [field, names](const DaemonConfig& config) {
    for (const auto& [spelling, value] : names) {
      if (config.*field == value) return std::string(spelling);
    }
    return std::string("?");
  };
  return Knob{
      .name = name,
      .type = KnobType::kEnum,
      .description = description,
      .accepts = absl::StrJoin(spellings, "|"),
      .parse = [field, names](absl::string_view text, DaemonConfig& config) -> absl::Status {
        const absl::string_view word = absl::StripAsciiWhitespace(text);
        std::vector<absl::string_view> known;
        for (const auto& [spelling, value] : names) {
          if (absl::EqualsIgnoreCase(word, spelling)) {
            config.*field = value;
            return absl::OkStatus();
          }
          known.push_back(spelling);
        }
        return absl::InvalidArgumentError(
            absl::StrCat("'", text, "' is not one of ", absl::StrJoin(known, ", ")));
      },
      .format = format,
      .format_readable = format,
  };
}

template <typename T>
Knob Unsigned(absl::string_view name, Field<T> field, T min, T max, absl::string_view description) {
  static_assert(std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>);
  auto format = [field](const DaemonConfig& config) { return absl::StrCat(config.*field); };
  return Knob{
      .name = name,
      .type = sizeof(T) == 4 ? KnobType::kUint32 : KnobType::kUint64,
      .description = description,
      .accepts =
          RangeText(absl::StrCat(min), absl::StrCat(max), max == std::numeric_limits<T>::max()),
      .parse = [field, min, max](absl::string_view text, DaemonConfig& config) -> absl::Status {
        ASSIGN_OR_RETURN(const uint64_t value, ParseUnsigned(text, std::numeric_limits<T>::max()));
        if (value < min) return OutOfRange(text, true, absl::StrCat(min));
        if (value > max) return OutOfRange(text, false, absl::StrCat(max));
        config.*field = static_cast<T>(value);
        return absl::OkStatus();
      },
      .format = format,
      .format_readable = format,
  };
}

Knob Bytes(absl::string_view name, Field<uint64_t> field, uint64_t min, uint64_t max,
           absl::string_view description) {
  return Knob{
      .name = name,
      .type = KnobType::kByteSize,
      .description = description,
      .accepts = RangeText(FormatByteSize(min), FormatByteSize(max),
                           max == std::numeric_limits<uint64_t>::max()),
      .parse = [field, min, max](absl::string_view text, DaemonConfig& config) -> absl::Status {
        ASSIGN_OR_RETURN(const uint64_t value, ParseByteSize(text));
        if (value < min) return OutOfRange(text, true, FormatByteSize(min));
        if (value > max) return OutOfRange(text, false, FormatByteSize(max));
        config.*field = value;
        return absl::OkStatus();
      },
      .format = [field](const DaemonConfig& config) { return absl::StrCat(config.*field); },
      .format_readable =
          [field](const DaemonConfig& config) { return FormatByteSize(config.*field); },
  };
}

// Durations must be positive (a zero timeout would fail every job at once),
// unless 0 means "off" for the knob.
enum class Zero { kRefused, kMeansOff };

Knob Seconds(absl::string_view name, Field<double> field, double max, absl::string_view description,
             Zero zero = Zero::kRefused) {
  auto format = [field](const DaemonConfig& config) { return FormatSeconds(config.*field); };
  const bool zero_off = zero == Zero::kMeansOff;
  return Knob{
      .name = name,
      .type = KnobType::kSeconds,
      .description = description,
      .accepts = absl::StrCat(zero_off ? "0 (off), or " : "", "> 0 and <= ", FormatSeconds(max)),
      .parse = [field, max, zero_off](absl::string_view text,
                                      DaemonConfig& config) -> absl::Status {
        ASSIGN_OR_RETURN(const double value, ParseSeconds(text));
        if (value < 0 || (value == 0 && !zero_off)) {
          return absl::InvalidArgumentError(
              absl::StrCat("'", text, zero_off ? "' is negative" : "' is not greater than 0"));
        }
        if (value > max) return OutOfRange(text, false, FormatSeconds(max));
        config.*field = value;
        return absl::OkStatus();
      },
      .format = format,
      .format_readable = format,
  };
}

Knob Bool(absl::string_view name, Field<bool> field, absl::string_view description) {
  auto format = [field](const DaemonConfig& config) { return FormatBool(config.*field); };
  return Knob{
      .name = name,
      .type = KnobType::kBool,
      .description = description,
      .accepts = "true|false (also yes|no, on|off, 1|0)",
      .parse = [field](absl::string_view text, DaemonConfig& config) -> absl::Status {
        ASSIGN_OR_RETURN(config.*field, ParseBool(text));
        return absl::OkStatus();
      },
      .format = format,
      .format_readable = format,
  };
}

Knob Uint32List(absl::string_view name, Field<std::vector<uint32_t>> field,
                absl::string_view description) {
  auto format = [field](const DaemonConfig& config) { return FormatUint32List(config.*field); };
  return Knob{
      .name = name,
      .type = KnobType::kUint32List,
      .description = description,
      .accepts = "comma-separated or a YAML sequence",
      .parse = [field](absl::string_view text, DaemonConfig& config) -> absl::Status {
        ASSIGN_OR_RETURN(config.*field, ParseUint32List(text));
        return absl::OkStatus();
      },
      .format = format,
      .format_readable = format,
  };
}

absl::Status CheckSocketPath(absl::string_view path) {
  // sun_path counts the terminating NUL.
  constexpr size_t kSunPathBytes = sizeof(sockaddr_un{}.sun_path);
  if (path.empty()) return absl::InvalidArgumentError("the socket path is empty");
  if (path.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not an absolute path"));
  }
  if (absl::StrContains(path, absl::string_view("\0", 1))) {
    return absl::InvalidArgumentError("the socket path contains a NUL byte");
  }
  if (path.size() >= kSunPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is ", path.size(),
                                                   " bytes long; a Unix socket path must be ",
                                                   "shorter than ", kSunPathBytes, " bytes"));
  }
  return absl::OkStatus();
}

// Empty (off) or absolute: the daemon's working directory is whatever its
// service manager chose, so a relative path would land somewhere surprising.
absl::Status CheckTimelinePath(absl::string_view path) {
  if (path.empty()) return absl::OkStatus();
  if (path.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not an absolute path"));
  }
  if (absl::StrContains(path, absl::string_view("\0", 1))) {
    return absl::InvalidArgumentError("the path contains a NUL byte");
  }
  return absl::OkStatus();
}

// A name or a number; it is resolved when the socket is created, where an
// unknown group is reported.
absl::Status CheckGroup(absl::string_view group) {
  if (group.empty()) return absl::OkStatus();
  if (std::all_of(group.begin(), group.end(), absl::ascii_isdigit)) {
    return ParseUnsigned(group, std::numeric_limits<uint32_t>::max()).status();
  }
  // What shadow-utils accepts: a letter or '_', then letters, digits, '_',
  // '.', '-', and an optional trailing '$'.
  const absl::string_view body = absl::StripSuffix(group, "$");
  bool valid = !body.empty() && (absl::ascii_isalpha(body.front()) || body.front() == '_');
  for (const char c : body) {
    valid = valid && (absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-');
  }
  if (!valid) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", group, "' is neither a group name nor a group id"));
  }
  return absl::OkStatus();
}

// Empty (off) or HOST:PORT; whether it can be bound is found out at start-up.
absl::Status CheckListenAddress(absl::string_view address) {
  if (address.empty()) return absl::OkStatus();
  return ParseHostPort(address).status();
}

// Empty (the host name), or a host name or IP address; whether this machine
// has it is found out when a job's world binds it.
absl::Status CheckNodeAddress(absl::string_view address) {
  if (address.empty()) return absl::OkStatus();
  if (address.find(':') != absl::string_view::npos && !absl::StartsWith(address, "[")) {
    return absl::InvalidArgumentError("an IPv6 address goes in brackets, without a port");
  }
  return ParseHostPort(absl::StrCat(address, ":0")).status();
}

absl::Status CheckLogLevel(absl::string_view spec) {
  return collective::log::ParseLevelSpec(spec).status();
}

void AddSection(std::vector<Knob>& table, absl::string_view section, std::vector<Knob> knobs) {
  for (Knob& knob : knobs) {
    knob.section = section;
    table.push_back(std::move(knob));
  }
}

// Names each knob after its field, so the two cannot drift apart.
#define COLLECTIVE_KNOB(field) #field, &DaemonConfig::field

std::vector<Knob> BuildTable() {
  std::vector<Knob> table;
  AddSection(table, "Socket & security",
             {
                 Text(COLLECTIVE_KNOB(socket), KnobType::kPath, CheckSocketPath,
                      "absolute path shorter than 108 bytes",
                      "Unix socket that clients and collectivectl connect to."),
                 Text(COLLECTIVE_KNOB(socket_group), KnobType::kString, CheckGroup,
                      "group name, group id, or empty",
                      "Group that owns the socket file (mode 0660); its members, by primary or "
                      "supplementary group, are admitted. Empty: the daemon's own group."),
                 Uint32List(COLLECTIVE_KNOB(allowed_uids),
                            "Uids allowed to connect besides the daemon's own uid and root."),
                 Uint32List(COLLECTIVE_KNOB(allowed_gids),
                            "Peers whose primary or supplementary groups include one of these "
                            "gids may connect too."),
                 Seconds(COLLECTIVE_KNOB(silent_connection_timeout_seconds), 3600.0,
                         "A new connection that sends nothing for this long is closed (clients "
                         "speak at once); until then it waits outside the RPC server, with at "
                         "most a quarter of the daemon's descriptors held by such connections."),
             });
  AddSection(table, "Logging",
             {
                 Text(COLLECTIVE_KNOB(log_level), KnobType::kString, CheckLogLevel,
                      "level[,subsystem=level...]",
                      "Default log level, then optional per-subsystem levels, e.g. "
                      "\"info,coord=debug,rpc=trace\". Levels: trace, debug, info, warn, error, "
                      "critical, off. Subsystems: daemon, rpc, shm, coord, exec, mpi, nccl, cfg."),
                 Enum(COLLECTIVE_KNOB(log_format),
                      {{"text", LogFormat::kText}, {"json", LogFormat::kJson}},
                      "Format of the log lines on stderr: text for people, json (one object per "
                      "line) for log collectors."),
                 Enum(COLLECTIVE_KNOB(log_priority_prefix),
                      {{"auto", LogPriorityPrefix::kAuto},
                       {"always", LogPriorityPrefix::kAlways},
                       {"never", LogPriorityPrefix::kNever}},
                      "Start each log line with its syslog priority (<3> for errors, <4> "
                      "warnings, <6> info, <7> debug), which journald stores as the entry's "
                      "priority, so that journalctl -p err selects the daemon's errors. auto: "
                      "when stderr is the journal (systemd sets JOURNAL_STREAM)."),
             });
  AddSection(table, "Metrics",
             {
                 Text(COLLECTIVE_KNOB(metrics_listen), KnobType::kString, CheckListenAddress,
                      "HOST:PORT, or empty",
                      "Also serve the Prometheus metrics of `collectivectl metrics` over HTTP "
                      "(GET /metrics) on this address, e.g. 127.0.0.1:9464 (port 0: any free "
                      "port, shown by `collectivectl status`); empty: no HTTP listener."),
             });
  AddSection(table, "Timeline",
             {
                 Text(COLLECTIVE_KNOB(timeline_file), KnobType::kPath, CheckTimelinePath,
                      "absolute path, or empty",
                      "Chrome-trace JSON file (chrome://tracing, Perfetto) the daemon records its "
                      "work into from start-up, written as the daemon's own user; empty: no "
                      "timeline until `collectivectl timeline start FILE`."),
                 Bool(COLLECTIVE_KNOB(timeline_mark_cycles),
                      "Also mark every cycle of the engine in the timeline (a CYCLE instant)."),
             });
  AddSection(
      table, "Jobs",
      {
          Seconds(COLLECTIVE_KNOB(register_timeout_seconds), 86400.0,
                  "How long a job may take to form, from its first registration, and how long a "
                  "registered client may take to open its session."),
          Unsigned<uint32_t>(COLLECTIVE_KNOB(heartbeat_interval_ms), 10, 60000,
                             "How often, in milliseconds, the daemon stamps its heartbeat into "
                             "every client segment."),
          Unsigned<uint32_t>(COLLECTIVE_KNOB(max_jobs), 1, 4096,
                             "Jobs the daemon serves at once; the next job's registration is "
                             "refused (RESOURCE_EXHAUSTED, naming the jobs it serves)."),
          Unsigned<uint32_t>(COLLECTIVE_KNOB(max_outstanding_requests), 1, 1 << 20,
                             "Requests one client may have in flight; also sizes its completion "
                             "and submission rings."),
          Unsigned<uint32_t>(COLLECTIVE_KNOB(max_name_bytes), 1, 65536,
                             "Longest tensor name, in bytes, that a client may submit."),
          Seconds(COLLECTIVE_KNOB(stall_check_seconds), 86400.0,
                  "Tensors that some ranks of a process set submitted and others did not are "
                  "reported (log and collectivectl status: which ranks miss which tensors) "
                  "after this long.",
                  Zero::kMeansOff),
          Seconds(COLLECTIVE_KNOB(stall_shutdown_seconds), 86400.0,
                  "Such tensors are failed on every rank that submitted them after this long, "
                  "with an error that says why.",
                  Zero::kMeansOff),
      });
  AddSection(
      table, "Memory & fusion",
      {
          Bytes(COLLECTIVE_KNOB(fusion_threshold_bytes), 0, kTiB,
                "Ready tensors of the same kind are fused up to this many bytes; 0 disables "
                "fusion."),
          Bytes(COLLECTIVE_KNOB(default_arena_bytes), 4 * kKiB, kTiB,
                "Data arena of a client that does not ask for a size; at most "
                "max_arena_bytes."),
          Bytes(COLLECTIVE_KNOB(max_arena_bytes), 4 * kKiB, kTiB,
                "Largest data arena a client may ask for."),
          Bytes(COLLECTIVE_KNOB(result_arena_bytes), kMiB, std::numeric_limits<uint64_t>::max(),
                "Size of each job's result segment, where results wait until every reader "
                "released them; at least fusion_threshold_bytes."),
          Bytes(COLLECTIVE_KNOB(memory_budget_bytes), 0, std::numeric_limits<uint64_t>::max(),
                "Shared memory the daemon may hand out to all jobs together: every client's "
                "arena and every job's result segment. A registration that would pass it is "
                "refused (RESOURCE_EXHAUSTED, naming what each job holds); 0: no budget."),
      });
  AddSection(table, "Performance",
             {
                 Unsigned<uint32_t>(COLLECTIVE_KNOB(reduce_threads), 0, 1024,
                                    "Threads that share a large reduction; 0: one per online "
                                    "core."),
                 Enum(COLLECTIVE_KNOB(engine_wait),
                      {{"auto", EngineWait::kAuto}, {"doorbell", EngineWait::kDoorbell}},
                      "How the engine sleeps while it waits for submissions. auto: on every "
                      "client's own word at once (futex_waitv, Linux 5.16 and later), else on "
                      "the job's doorbell word, which every client rings; doorbell: on the "
                      "doorbell whatever the kernel (to measure it, or to work around a "
                      "kernel)."),
                 Unsigned<uint32_t>(
                     COLLECTIVE_KNOB(engine_spin_us), 0, 1000000,
                     "For this many microseconds after it ran every request its ranks had "
                     "submitted, or (across nodes) made progress while another daemon owes it "
                     "a reply, the engine looks for work again at once instead of sleeping, "
                     "yielding its core between looks: the ranks' next small requests, or the "
                     "reply, usually come within microseconds, and a sleep costs a wake-up of "
                     "tens. 0: it sleeps as soon as it finds nothing to do."),
             });
  AddSection(
      table, "Multi-node",
      {
          Enum(COLLECTIVE_KNOB(multi_node), {{"auto", MultiNode::kAuto}, {"off", MultiNode::kOff}},
               "auto: when an MPI launcher (mpirun, srun) started the daemon, the daemons "
               "of the job form an MPI world, one per node; off: a world of one node."),
          Text(COLLECTIVE_KNOB(node_address), KnobType::kString, CheckNodeAddress,
               "host name, IP address ([IPv6]) or empty",
               "Where the daemons of other nodes reach this one for the jobs they share "
               "with it: each job's world among resident daemons (Gloo over TCP) listens "
               "on a port of its own at this address. Empty: this machine's host name."),
          Unsigned<uint32_t>(COLLECTIVE_KNOB(cycle_time_ms), 1, 1000,
                             "How often, in milliseconds, the engine looks for the other "
                             "daemons' messages while it waits for them."),
          Seconds(COLLECTIVE_KNOB(node_timeout_seconds), 86400.0,
                  "A node whose daemon sends nothing (heartbeats go every "
                  "heartbeat_interval_ms) for this long is taken for dead: the job fails "
                  "on every other node with an error naming it and its ranks."),
          Unsigned<uint32_t>(COLLECTIVE_KNOB(response_cache_capacity), 0, 1 << 20,
                             "Tensors the response cache remembers, so that steady-state "
                             "steps announce them by a bit instead of every request; 0 "
                             "disables it. Every node must use the same value."),
          Bytes(COLLECTIVE_KNOB(cross_node_chunk_bytes), 4 * kKiB, kGiB,
                "Collectives across nodes move in chunks of this size, the local "
                "reduction of one overlapping the transfer of the one before. Every node "
                "must use the same value."),
          Bytes(COLLECTIVE_KNOB(cross_node_inline_bytes), 0, kMiB,
                "A host-memory allreduce across nodes of at most this many bytes, once the "
                "response cache holds it, travels with the negotiation: each node sends its "
                "ranks' part with its announcement, node 0 combines the parts as it decides "
                "and sends the result with the decision, so the data takes no round trip of "
                "its own. 0: always through MPI after the decision."),
          Bool(COLLECTIVE_KNOB(cross_node_peer_parts),
               "Each node also sends its part of such an allreduce to the other nodes of its "
               "process set, and a node that holds every node's part combines them itself, "
               "as node 0 does, instead of waiting for node 0's decision: one hop between "
               "daemons instead of two, for one more message per node and step."),
      });
  AddSection(
      table, "Autotuning",
      {
          Bool(COLLECTIVE_KNOB(autotune),
               "Tune fusion_threshold_bytes (and, for a job across nodes, cycle_time_ms and "
               "cross_node_chunk_bytes) during each job's first steps: every trial measures the "
               "bytes reduced per second over a few training steps, Bayesian optimization "
               "(a Gaussian process, expected improvement) picks the next values, and after "
               "the last trial the best measured values stay. The configured values are the "
               "first trial. Across nodes node 0 decides and its values travel with its "
               "decisions, so every node uses the same values from the same step."),
          Text(COLLECTIVE_KNOB(autotune_log_file), KnobType::kPath, CheckTimelinePath,
               "absolute path, or empty",
               "CSV file that autotuning writes, one line per trial (its values and score in "
               "bytes per second) and a last line with the values it kept; empty: none. Across "
               "nodes only node 0 writes it."),
          Unsigned<uint32_t>(COLLECTIVE_KNOB(autotune_warmup_samples), 0, 1000,
                             "Samples measured and discarded before the first trial (a job's "
                             "first steps are slow)."),
          Unsigned<uint32_t>(COLLECTIVE_KNOB(autotune_steps_per_sample), 1, 10000,
                             "Training steps per sample; a step is recognised by a tensor "
                             "name coming again."),
          Unsigned<uint32_t>(COLLECTIVE_KNOB(autotune_bayes_opt_max_samples), 1, 1000,
                             "Trials before autotuning keeps the best values it measured."),
      });
  AddSection(table, "GPU",
             {
                 Seconds(COLLECTIVE_KNOB(gpu_timeout_seconds), 86400.0,
                         "A batch of CUDA tensors that the GPU has not finished after this long "
                         "fails the job on every rank, and the job's NCCL communicators are "
                         "aborted rather than left hanging."),
             });
  return table;
}

#undef COLLECTIVE_KNOB

}  // namespace

absl::string_view KnobTypeName(KnobType type) {
  switch (type) {
    case KnobType::kString:
      return "string";
    case KnobType::kPath:
      return "path";
    case KnobType::kEnum:
      return "enum";
    case KnobType::kBool:
      return "bool";
    case KnobType::kUint32List:
      return "list of uint32";
    case KnobType::kUint32:
      return "uint32";
    case KnobType::kUint64:
      return "uint64";
    case KnobType::kByteSize:
      return "byte size";
    case KnobType::kSeconds:
      return "seconds";
  }
  return "?";
}

std::string Knob::EnvName() const {
  return absl::StrCat("COLLECTIVED_", absl::AsciiStrToUpper(name));
}

std::string Knob::FlagName() const {
  return absl::StrCat("--", absl::StrReplaceAll(name, {{"_", "-"}}));
}

const std::vector<Knob>& Knobs() {
  static const auto* const table = new std::vector<Knob>(BuildTable());
  return *table;
}

const Knob* FindKnob(absl::string_view name) {
  for (const Knob& knob : Knobs()) {
    if (knob.name == name) return &knob;
  }
  return nullptr;
}

const std::vector<KnobRule>& KnobRules() {
  static const auto* const rules = new std::vector<KnobRule>{
      {
          .knobs = {"default_arena_bytes", "max_arena_bytes"},
          .requirement = "default_arena_bytes must not exceed max_arena_bytes",
          .holds = [](const DaemonConfig& c) { return c.default_arena_bytes <= c.max_arena_bytes; },
      },
      {
          .knobs = {"result_arena_bytes", "fusion_threshold_bytes"},
          .requirement = "result_arena_bytes must be at least fusion_threshold_bytes (a fused "
                         "response is written into the result segment whole)",
          .holds =
              [](const DaemonConfig& c) {
                return c.result_arena_bytes >= c.fusion_threshold_bytes;
              },
      },
  };
  return *rules;
}

}  // namespace collective::config
