// TrainerGroup: the N ranks of the job, each a child process in a process
// group of its own, with its output prefixed by its rank (or passed through).
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/launcher/child_process.h"
#include "client/launcher/poll_set.h"
#include "client/launcher/prefixed_stream.h"
#include "client/launcher/rank_environment.h"

namespace collective::launcher {

// Where the ranks' output goes: the launcher's own stdout and stderr, each
// line prefixed by the rank or passed through, and with `directory` also
// copied as written to `<directory>/rank.<N>/stdout` and `stderr` (N padded
// with zeros to `rank_digits`), horovodrun's --output-filename.
struct OutputOptions {
  bool prefix = true;
  // Each line also starts with the time (horovodrun's
  // --prefix-output-with-timestamp).
  bool timestamp = false;
  std::string directory;
  int rank_digits = 1;
};

struct Trainer {
  // The rank (an elastic job: the worker's number, which it keeps while
  // its rank changes), as the output's prefix shows it.
  int rank = 0;
  ChildProcess process;
  std::optional<PrefixedStream> out;  // unset when the output passes through
  std::optional<PrefixedStream> err;
};

class TrainerGroup {
 public:
  // Starts `command` once per rank of `job`, in rank order, with
  // RankEnvironment(`environment`, job, rank). If one cannot start, those
  // already started are killed and the error says why (NOT_FOUND: no such
  // command).
  static absl::StatusOr<TrainerGroup> Start(const std::vector<std::string>& command,
                                            const JobIdentity& job, const Environment& environment,
                                            const OutputOptions& output);

  // The same for a job of several nodes: node n runs `local_sizes[n]`
  // ranks on host `hosts[n]` against the daemon on `sockets[n]`, ranks
  // numbered node after node, each with RankEnvironment for its place.
  static absl::StatusOr<TrainerGroup> StartOnNodes(const std::vector<std::string>& command,
                                                   const std::string& job_id,
                                                   const std::vector<std::string>& hosts,
                                                   const std::vector<std::string>& sockets,
                                                   const std::vector<int>& local_sizes,
                                                   const Environment& environment,
                                                   const OutputOptions& output);

  // Starts one more: `command` with `environment`, its output handled as
  // `output` says for `rank`; with `input_pipe`, its stdin a pipe the
  // launcher holds open until it exits (SpawnOptions). Callbacks of a Watch
  // in progress stay valid (trainers live in a deque).
  absl::Status Add(int rank, const std::vector<std::string>& command,
                   const Environment& environment, const OutputOptions& output,
                   bool input_pipe = false);

  std::deque<Trainer>& trainers() { return trainers_; }
  int running() const;

  // Adds every open output pipe and every running rank's exit to `set`;
  // `on_exit` gets the rank that exited once it is reaped.
  void Watch(PollSet& set, const std::function<void(Trainer&)>& on_exit);
  // Sends `signal` to every rank still running (and its process group).
  void SignalRunning(int signal) const;
  // Once every rank exited: copies what is left in the pipes without
  // waiting for writers that outlive the ranks.
  void DrainOutput();

 private:
  std::deque<Trainer> trainers_;
};

}  // namespace collective::launcher
