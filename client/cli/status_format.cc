#include "client/cli/status_format.h"

#include <algorithm>
#include <ctime>
#include <vector>

#include <fmt/format.h>

#include "absl/strings/str_join.h"
#include "common/dtype.h"

namespace collective::cli {
namespace {

std::string JobStateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_IDLE:
      return "idle";
    case v1::JOB_STATE_FORMING:
      return "forming";
    case v1::JOB_STATE_RUNNING:
      return "running";
    case v1::JOB_STATE_FAILED:
      return "failed";
    case v1::JOB_STATE_ENDING:
      return "ending";
    default:
      return "unknown";
  }
}

std::string LocalTime(int64_t unix_ms) {
  const time_t seconds = static_cast<time_t>(unix_ms / 1000);
  std::tm parts{};
  localtime_r(&seconds, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &parts);
  return text;
}

// Columns sized to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const {
    std::vector<size_t> widths(rows_.front().size(), 0);
    for (const auto& row : rows_) {
      for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        line += i + 1 == row.size() ? row[i] : fmt::format("{:<{}}  ", row[i], widths[i]);
      }
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string Ranks(const google::protobuf::RepeatedField<int32_t>& ranks) {
  if (ranks.empty()) return "-";
  // Long lists are cut: the first few say enough, the count says the rest.
  constexpr int kShown = 16;
  std::vector<int32_t> shown(ranks.begin(), ranks.begin() + std::min(ranks.size(), kShown));
  std::string text = absl::StrJoin(shown, ",");
  if (ranks.size() > kShown) text += fmt::format(",... ({} in all)", ranks.size());
  return text;
}

}  // namespace

std::string HumanBytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string HumanDuration(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  const auto whole = static_cast<int64_t>(seconds);
  if (whole < 3600) return fmt::format("{}m{:02}s", whole / 60, whole % 60);
  return fmt::format("{}h{:02}m", whole / 3600, whole % 3600 / 60);
}

namespace {

// "autotune: ...": the knobs in force and where tuning stands.
std::string FormatAutotune(const v1::AutotuneStatus& tune) {
  std::string state = "off";
  if (tune.enabled() && tune.tuning()) {
    state = tune.trial() == 0 ? fmt::format("warming up (then {} trials)", tune.max_trials())
                              : fmt::format("trial {} of {}", tune.trial(), tune.max_trials());
  } else if (tune.enabled()) {
    state = tune.trial() == 0 ? "on, no job tuned yet" : "on, values fixed";
  }
  return fmt::format(
      "autotune: {}; fusion threshold {}, cycle time {} ms, cross-node chunk {}, response "
      "cache {}\n",
      state, HumanBytes(tune.fusion_threshold_bytes()), tune.cycle_time_ms(),
      HumanBytes(tune.cross_node_chunk_bytes()), tune.response_cache() ? "on" : "off");
}

// One job: its state, its result arena, sets, nodes, autotuning, and its
// tables of clients, pending tensors and pending messages.
std::string FormatJob(const v1::JobReport& report) {
  std::string out;
  const v1::JobStatus& job = report.job();
  out += fmt::format("job '{}': {}, {} of {} local ranks registered", job.id(),
                     JobStateName(job.state()), job.registered(), job.local_size());
  if (job.formed_unix_ms() != 0) out += ", formed " + LocalTime(job.formed_unix_ms());
  if (!job.owner_uids().empty()) {
    out += fmt::format(", uid{} {}", job.owner_uids_size() > 1 ? "s" : "",
                       absl::StrJoin(job.owner_uids(), ","));
  }
  out += "\n";
  if (!job.missing_local_ranks().empty()) {
    out += fmt::format("missing local ranks: {}\n", Ranks(job.missing_local_ranks()));
  }
  if (!job.failure().empty()) out += fmt::format("reason: {}\n", job.failure());
  if (report.timeline().active()) {
    out += fmt::format("timeline of this job: recording to {} ({} events so far)\n",
                       report.timeline().path(), report.timeline().events_written());
  }
  if (report.result_arena_bytes() != 0) {
    out +=
        fmt::format("result arena: {} of {} in use\n", HumanBytes(report.result_arena_used_bytes()),
                    HumanBytes(report.result_arena_bytes()));
  }
  if (report.process_sets_size() > 1) {
    std::vector<std::string> sets;
    for (const v1::ProcessSet& set : report.process_sets()) {
      if (set.id() == 0) continue;
      sets.push_back(fmt::format("{}: [{}]", set.id(), absl::StrJoin(set.ranks(), ", ")));
    }
    out += fmt::format("process sets: {}\n", absl::StrJoin(sets, "; "));
  }
  if (!report.joined_ranks().empty()) {
    out += fmt::format("joined ranks: {}\n", Ranks(report.joined_ranks()));
  }
  if (report.has_negotiation()) {
    const v1::NegotiationStatus& negotiation = report.negotiation();
    out += fmt::format(
        "nodes: this is node {} of {} (local sizes {}); response cache: {} of {} entries\n",
        negotiation.node(), negotiation.nodes(), absl::StrJoin(negotiation.local_sizes(), ", "),
        negotiation.cache_entries(), negotiation.cache_capacity());
  }
  if (report.has_autotune()) out += FormatAutotune(report.autotune());
  const v1::Totals& totals = report.totals();
  out += fmt::format("reduced: {} collectives ({} requests), {}, {} errors\n", totals.collectives(),
                     totals.requests(), HumanBytes(totals.bytes_reduced()), totals.errors());
  if (!report.clients().empty()) {
    Table clients({"RANK", "LOCAL", "PID", "UID", "SESSION", "CONNECTED", "SUBMITTED", "REQUESTS",
                   "OUTSTANDING", "RESULTS HELD"});
    for (const v1::ClientStatus& client : report.clients()) {
      clients.Add({client.rank() < 0 ? "-" : std::to_string(client.rank()),
                   std::to_string(client.local_rank()), std::to_string(client.pid()),
                   std::to_string(client.uid()), client.attached() ? "attached" : "-",
                   LocalTime(client.connected_unix_ms()), HumanBytes(client.bytes_submitted()),
                   std::to_string(client.requests_submitted()),
                   std::to_string(client.outstanding_requests()),
                   HumanBytes(client.result_bytes_held())});
    }
    out += "\nCLIENTS\n" + clients.Render();
  }
  if (!report.pending().empty()) {
    Table pending({"NAME", "COLLECTIVE", "SET", "READY RANKS", "MISSING RANKS", "AGE"});
    for (const v1::PendingTensor& tensor : report.pending()) {
      pending.Add({tensor.name(), CollectiveName(tensor.collective()),
                   std::to_string(tensor.process_set_id()), Ranks(tensor.ready_ranks()),
                   tensor.waiting_for_other_nodes() && tensor.missing_ranks().empty()
                       ? "other nodes"
                       : Ranks(tensor.missing_ranks()),
                   HumanDuration(tensor.age_seconds()) + (tensor.stalled() ? " STALLED" : "")});
    }
    out += "\nPENDING TENSORS\n" + pending.Render();
  }
  if (!report.pending_messages().empty()) {
    // Who waits for whom: a send waits for its destination's receive, a
    // receive for its source's send.
    Table messages({"RANK", "WAITS IN", "FOR RANK", "TAG", "SET", "DTYPE", "BYTES", "AGE"});
    for (const v1::PendingMessage& message : report.pending_messages()) {
      const bool send = message.collective() == v1::COLLECTIVE_SEND;
      messages.Add({std::to_string(message.rank()), send ? "send" : "receive",
                    std::to_string(message.peer_rank()), std::to_string(message.tag()),
                    std::to_string(message.process_set_id()), DataTypeName(message.dtype()),
                    HumanBytes(message.bytes()), HumanDuration(message.age_seconds())});
    }
    out += "\nPENDING MESSAGES\n" + messages.Render();
  }
  return out;
}

}  // namespace

std::string FormatStatus(const v1::StatusResponse& status) {
  std::string out =
      fmt::format("collectived {} (pid {}) on {}, up {}\n", status.version(), status.pid(),
                  status.socket(), HumanDuration(status.uptime_seconds()));
  if (!status.metrics_url().empty()) out += fmt::format("metrics: {}\n", status.metrics_url());
  if (status.timeline().active()) {
    out += fmt::format("timeline: recording to {} ({} events so far)\n", status.timeline().path(),
                       status.timeline().events_written());
  }
  const v1::Totals& totals = status.totals();
  out += fmt::format(
      "totals: {} jobs, {} collectives ({} requests), {} reduced, {} fused batches, {} errors\n",
      totals.jobs(), totals.collectives(), totals.requests(), HumanBytes(totals.bytes_reduced()),
      totals.fused_batches(), totals.errors());
  if (totals.cross_node_collectives() != 0) {
    out += fmt::format("across nodes: {} collectives, {} exchanged\n",
                       totals.cross_node_collectives(), HumanBytes(totals.cross_node_bytes()));
  }
  if (totals.announced_in_full() + totals.announced_from_cache() != 0) {
    out += fmt::format("negotiation: {} tensors announced in full, {} from the response cache",
                       totals.announced_in_full(), totals.announced_from_cache());
    if (totals.decided_in_full() + totals.decided_from_cache() != 0) {
      out += fmt::format("; node 0 decided {} in full, {} from the cache", totals.decided_in_full(),
                         totals.decided_from_cache());
      if (totals.decided_combined() != 0) {
        out += fmt::format(" ({} combined as it decided)", totals.decided_combined());
      }
    }
    if (totals.combined_from_peers() != 0) {
      out += fmt::format("; {} combined here from every node's part before node 0's decision",
                         totals.combined_from_peers());
    }
    out += "\n";
  }

  if (status.jobs().empty()) {
    out += "job: none (waiting for clients to register)\n";
    // The last job's tuning, or the configured values.
    if (status.has_autotune()) out += FormatAutotune(status.autotune());
    return out;
  }
  if (status.jobs_size() > 1) {
    // Every job in one table first: what an operator of a shared node scans.
    Table jobs({"JOB", "STATE", "RANKS", "OWNER UIDS", "REDUCED", "PENDING", "WAITS FOR"});
    for (const v1::JobReport& report : status.jobs()) {
      const v1::JobStatus& job = report.job();
      std::string waits = "-";
      if (!job.missing_local_ranks().empty()) {
        waits = "local ranks " + Ranks(job.missing_local_ranks());
      } else if (!report.pending().empty()) {
        const v1::PendingTensor& oldest = report.pending(0);
        waits = fmt::format("'{}' from ranks {}", oldest.name(),
                            oldest.missing_ranks().empty() ? std::string("of other nodes")
                                                           : Ranks(oldest.missing_ranks()));
      }
      jobs.Add({job.id(), JobStateName(job.state()),
                fmt::format("{}/{}", job.registered(), job.local_size()),
                absl::StrJoin(job.owner_uids(), ","), HumanBytes(report.totals().bytes_reduced()),
                std::to_string(report.pending_size()), waits});
    }
    out += "\nJOBS\n" + jobs.Render();
  }
  for (const v1::JobReport& report : status.jobs()) out += "\n" + FormatJob(report);
  return out;
}

}  // namespace collective::cli
