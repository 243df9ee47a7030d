// ElasticWorld: who belongs to an elastic job (collectiverun --elastic),
// generation after generation, on which hosts (stand-in nodes of this
// machine), and the rendezvous directory that tells the workers. Only the
// launcher's thread (its supervising loop) touches it.
//
// Each worker has a number it keeps for life, and a host; each generation
// is a job of its own (job id "<base>.<generation>") whose ranks are the
// workers listed in rank order, grouped by node as the daemons number
// ranks (node offset + local rank). The nodes are the hosts in the order
// their first worker comes among the survivors, then the hosts of added
// workers; within a node, survivors keep their order and added workers come
// last. So rank 0 of a new generation is the first survivor, and holds the
// state it broadcasts.
//
// Hosts of other machines (`remote`): each gets a copy of the directory,
// kept by a host agent there (remote_hosts.h), and its workers are started
// over ssh; the daemons' sockets, and the directory a worker is told, are
// its host's.
//
// Daemons: with one per host (a host discovery script's job), a generation
// whose nodes differ from those the daemons serve needs a new MPI world of
// daemons (an epoch). Its workers wait for the marker `daemons-<epoch>`;
// the launcher starts that world once every worker of the generation has
// left the job on the old one (DaemonsToStart), and then says so
// (DaemonsStarted). Without, every worker uses the job's one daemon. The
// directory (0700, the launcher's) holds `world`, the latest generation,
// replaced atomically (written beside it, then renamed), and markers that
// say a worker has exited (written here), joins a generation or waits for
// the job to re-form after a collective failed (written by the worker);
// collective.common.elastic_rendezvous and the launcher watch them with
// inotify.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/launcher/rank_environment.h"
#include "client/launcher/remote_hosts.h"
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
    // One daemon per host, on <directory>/daemons/host<number>.sock, which
    // the launcher starts (DaemonsToStart); off: the job's socket for all.
    bool daemon_per_host = false;
    // Set: hosts of other machines are reached so (needs daemon_per_host);
    // unset: every host is this machine.
    std::optional<RemoteShell> remote;
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

  // Publishes generation 0 and starts its workers in `trainers`, worker i on
  // host `hosts[i]` (a HostNumber); without, all on host 0.
  absl::Status Start(TrainerGroup& trainers, const std::vector<int>& hosts = {});
  // Worker `worker` failed, or was stopped (`replace` false: the host
  // discovery script lists fewer slots): publishes the next generation
  // without it (and, for a failure, with a replacement while restarts
  // remain). Returns what happened, in words; FAILED_PRECONDITION when
  // fewer than min_ranks would remain, and the job must stop.
  absl::StatusOr<std::string> Remove(int worker, TrainerGroup& trainers, bool replace = true);
  // Starts one more worker on `host` and publishes the generation that
  // includes it; FAILED_PRECONDITION at max_ranks.
  absl::StatusOr<std::string> Add(TrainerGroup& trainers, int host = 0) {
    return Add(trainers, std::vector<int>{host});
  }
  // The same for a worker on each of `hosts` (a host may repeat), in one
  // generation; FAILED_PRECONDITION past max_ranks (none added).
  absl::StatusOr<std::string> Add(TrainerGroup& trainers, const std::vector<int>& hosts);
  // Worker `worker` failed, or was stopped, and fewer than min_ranks would
  // remain: no generation is published now. The failure counts in the next
  // one (Add, once slots are listed), which the survivors, waiting for a
  // generation after a failure, then join; as Horovod's driver waits for
  // slots before it re-forms.
  void Withdraw(int worker);
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

  // The hosts of the daemons to start, in node order, once the latest
  // generation needs a world of daemons other than the one running (none
  // at the start) and every worker of it has left its job on the old one
  // (it exited, it was started for the new world, or it says it joins a
  // generation of the new world); else nullopt. Never without
  // daemon_per_host.
  struct DaemonPlan {
    int epoch = -1;
    std::vector<int> hosts;
  };
  std::optional<DaemonPlan> DaemonsToStart() const;
  // The daemons of `plan` serve: tells the workers waiting for them (a
  // later plan made while they started is started next). Without a plan:
  // the latest one's.
  absl::Status DaemonsStarted(const DaemonPlan& plan);
  absl::Status DaemonsStarted();
  // The hosts of the daemons that serve, in node order (empty while none
  // does).
  const std::vector<int>& running_nodes() const { return running_nodes_; }
  // The running daemons are gone (a node's daemon died, and the launcher
  // stopped the others): the next generation gets a new world even on the
  // same nodes.
  void DaemonsLost();
  // Host `host`'s daemon's socket (the job's, without daemon_per_host).
  std::string SocketOf(int host) const;
  // The host whose daemon listens on `socket`, if any.
  std::optional<int> HostOfSocket(const std::string& socket) const;
  // Host `host` is another machine (only with Options::remote).
  bool IsRemote(int host) const;
  // Host `host` can take workers: OK for this machine; for another, its
  // agent serves (started now unless it runs: HostAgents::Attach).
  absl::Status Reach(int host);
  // Where host `host`'s workers rendezvous: the directory, or its copy there.
  std::string DirectoryOf(int host) const;
  // The agents of the other machines; null without Options::remote.
  HostAgents* agents() const { return agents_.get(); }

  // Hosts are numbered in the order they are first named.
  int HostNumber(const std::string& name);
  const std::string& HostName(int host) const { return hosts_[static_cast<size_t>(host)]; }
  int HostOf(int worker) const { return host_of_.at(worker); }

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

  // Starts workers `added` as members of a generation of `listed`
  // (survivors in rank order, then the added workers), ranked by node as
  // the class comment says, then makes that generation current.
  absl::Status Publish(const std::vector<int>& listed, const std::vector<int>& added,
                       TrainerGroup& trainers);
  absl::Status WriteWorld() const;

  Options options_;
  JobIdentity job_;  // the socket, the base job id; size unused
  Environment environment_;
  std::vector<std::string> command_;
  OutputOptions output_;
  std::string directory_;
  UniqueFd watch_;
  std::unique_ptr<HostAgents> agents_;  // with Options::remote
  int generation_ = -1;
  std::vector<int> workers_;      // of the current generation, in rank order
  std::vector<int> local_sizes_;  // of its nodes, in node order
  int next_worker_ = 0;
  std::vector<std::string> hosts_;  // by host number
  std::map<int, int> host_of_;      // worker -> host number
  std::map<int, int> started_in_;   // worker -> the generation it was started for
  // The daemons: the epoch (and its nodes, as host numbers) the latest
  // generation needs, since which generation, and the epoch running.
  int planned_epoch_ = -1;
  std::vector<int> planned_nodes_;
  int planned_since_ = 0;
  int running_epoch_ = -1;
  std::vector<int> running_nodes_;
  // Failures so far (workers that died, jobs that failed on every rank): a
  // generation published after a failure says so, which tells the survivors
  // it is the one to join (an earlier one, made while workers were added,
  // may still list a dead worker).
  int failures_ = 0;
};

}  // namespace collective::launcher
