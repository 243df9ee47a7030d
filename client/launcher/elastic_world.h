// ElasticWorld: who belongs to an elastic job (collectiverun --elastic) on
// this node, generation after generation, and the rendezvous directory that
// tells the workers. Only the launcher's thread (its supervising loop)
// touches it.
//
// Each worker has a number it keeps for life; each generation is a job of
// its own (job id "<base>.<generation>") whose ranks are the workers listed
// in rank order: survivors keep their order, added workers come last, so
// rank 0 of a new generation always holds the state it broadcasts. The
// directory (0700, the launcher's) holds `world`, the latest generation,
// replaced atomically (written beside it, then renamed), and markers that
// say a worker has exited (written here), joins a generation or waits for
// the job to re-form after a collective failed (written by the worker);
// collective.common.elastic_rendezvous and the launcher watch them with
// inotify.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/launcher/rank_environment.h"
#include "client/launcher/trainer_group.h"
#include "client/launcher/unique_fd.h"

namespace collective::launcher {

class ElasticWorld {
 public:
  struct Options {
    int min_ranks = 1;
    int max_ranks = 1;
    // Failed workers replaced by new ones, at most this many in all.
    int restarts = 0;
    // Generations after the first, at most this many (-1: no limit); one
    // more is refused with FAILED_PRECONDITION.
    int reset_limit = -1;
  };

  // Makes the rendezvous directory (under $TMPDIR or /tmp) for a job whose
  // first generation has `job.size` workers.
  static absl::StatusOr<std::unique_ptr<ElasticWorld>> Create(Options options,
                                                              const JobIdentity& job,
                                                              const Environment& environment,
                                                              std::vector<std::string> command,
                                                              OutputOptions output);
  ~ElasticWorld();  // removes the directory and what is in it
  ElasticWorld(const ElasticWorld&) = delete;
  ElasticWorld& operator=(const ElasticWorld&) = delete;

  // Publishes generation 0 and starts its workers in `trainers`.
  absl::Status Start(TrainerGroup& trainers);
  // Worker `worker` failed, or was stopped (`replace` false: the host
  // discovery script lists fewer slots): publishes the next generation
  // without it (and, for a failure, with a replacement while restarts
  // remain). Returns what happened, in words; FAILED_PRECONDITION when
  // fewer than min_ranks would remain, and the job must stop.
  absl::StatusOr<std::string> Remove(int worker, TrainerGroup& trainers, bool replace = true);
  // Starts one more worker and publishes the generation that includes it;
  // FAILED_PRECONDITION at max_ranks.
  absl::StatusOr<std::string> Add(TrainerGroup& trainers);
  // Worker `worker` exited (any way, before Remove for a failure): no later
  // generation lists it, and workers waiting to join learn that it is gone.
  void Exited(int worker);
  // The directory changed (`watch_fd()` is readable): once every live worker
  // that has joined a generation asked to re-form after the failures so far
  // (`reset-<failures>-<worker>`: a collective failed on every rank, and no
  // worker died), publishes the next generation with the same workers, as
  // Horovod's driver re-forms the job once every worker reported ready.
  // Returns what happened, in words, or nullopt.
  absl::StatusOr<std::optional<std::string>> OnDirectoryChanged(TrainerGroup& trainers);

  // The workers of the latest generation, in rank order.
  const std::vector<int>& workers() const { return workers_; }
  const std::string& directory() const { return directory_; }
  // inotify on the directory: readable when a file there was written.
  int watch_fd() const { return watch_.get(); }

 private:
  ElasticWorld(Options options, const JobIdentity& job, const Environment& environment,
               std::vector<std::string> command, OutputOptions output, std::string directory,
               UniqueFd watch);

  // Every live worker that has joined a generation asked to re-form after
  // `failures_` failures, and at least one did.
  bool EveryWorkerAwaitsReset() const;

  // Starts workers `added` as members of a generation of `workers` (their
  // ranks are their positions), then makes that generation current.
  absl::Status Publish(std::vector<int> workers, const std::vector<int>& added,
                       TrainerGroup& trainers);
  absl::Status WriteWorld() const;

  Options options_;
  JobIdentity job_;  // the socket, the base job id; size unused
  Environment environment_;
  std::vector<std::string> command_;
  OutputOptions output_;
  std::string directory_;
  UniqueFd watch_;
  int generation_ = -1;
  std::vector<int> workers_;  // of the current generation, in rank order
  int next_worker_ = 0;
  // Failures so far (workers that died, jobs that failed on every rank): a
  // generation published after a failure says so, which tells the survivors
  // it is the one to join (an earlier one, made while workers were added,
  // may still list a dead worker).
  int failures_ = 0;
};

}  // namespace collective::launcher
