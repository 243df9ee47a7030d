// JobSupervisor: watches a running job until every rank has exited, in one
// poll loop: copies the ranks' output, forwards signals, and stops the job
// when a rank fails or the private daemon dies. In an elastic job, a worker
// that fails re-forms the job without it while enough remain, SIGUSR1 adds
// a worker (see ElasticWorld), and a host discovery script's slots grow
// and shrink it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/launcher/daemon_runner.h"
#include "client/launcher/daemon_worlds.h"
#include "client/launcher/elastic_world.h"
#include "client/launcher/host_blacklist.h"
#include "client/launcher/host_discovery.h"
#include "client/launcher/signal_watcher.h"
#include "client/launcher/trainer_group.h"

namespace collective::launcher {

class JobSupervisor {
 public:
  struct Options {
    // From SIGTERM (or the forwarded signal) to SIGKILL for ranks being stopped.
    absl::Duration grace = absl::Seconds(10);
    bool verbose = false;
    // An elastic job with a host discovery script (or -H's fixed hosts, as
    // a script that always lists them): run every second, the
    // job grows to the slots of the hosts it lists (up to max_ranks, hosts
    // filled in the order listed) and shrinks to them (the newest workers
    // of a host stop; all of a host no longer listed); fewer than min_ranks
    // are waited out for elastic_timeout, then the job stops.
    const HostDiscovery* discovery = nullptr;
    // Starts a world of daemons on these sockets (node order) without
    // waiting for it: set when the job has a daemon per host, whose later
    // worlds the supervisor then starts and owns.
    DaemonWorlds::Launch launch_daemons;

    int min_ranks = 1;
    int max_ranks = 1;
    absl::Duration elastic_timeout = absl::Seconds(600);
    // With listed hosts: how long a blacklisted host stays out
    // (host_blacklist.h); unset: for good.
    std::optional<CooldownRange> blacklist_cooldown;
  };

  // `daemon` is null when the job uses a daemon the launcher did not start
  // (with launch_daemons, the first world of daemons, stopped once the job
  // needs another);
  // `elastic` is null unless the job is elastic.
  JobSupervisor(TrainerGroup& trainers, PrivateDaemon* daemon, ElasticWorld* elastic,
                const SignalWatcher& signals, Options options);

  // Returns once every rank has exited, with the launcher's exit code: 0 if
  // every rank exited 0; else that of the first failure (a rank's exit code
  // or 128 + its signal; 128 + a forwarded signal; 1 if the daemon died).
  int Run();
  ~JobSupervisor();

 private:
  void OnSignal(int signal);
  void OnTrainerExit(const Trainer& trainer);
  // An elastic job lost `trainer` (`what` says how): re-forms the job
  // without it (with a replacement if `replace` and restarts remain), or
  // waits for slots (AwaitSlotsWithout); when neither can be, says why and
  // stops the others, the launcher exiting with `exit_code`.
  void ReformWithout(const Trainer& trainer, const std::string& what, bool replace, int exit_code);
  // Says `what` and that the running ranks stop, and stops them.
  void StopOthers(const std::string& what, int exit_code);
  // A job on listed hosts (a script, or -H's): a worker failed with `status`. As
  // Horovod's driver does, its host is blacklisted and its other workers
  // stop, and the job re-forms on the other hosts; once every host of the
  // job is blacklisted, it stops.
  void BlacklistHostOf(const Trainer& trainer, int status, const std::string& what);
  // A job on listed hosts lost `trainer` (it failed or was stopped) and
  // fewer than --min-np workers remain: rather than stop, the failure is
  // held (ElasticWorld::Withdraw) while the survivors wait, up to the
  // elastic timeout, for slots to re-form with, as Horovod's driver waits.
  // False (nothing done) when the job is not such or enough remain.
  bool AwaitSlotsWithout(const Trainer& trainer, const std::string& what);
  // "host 127.0.0.2", or "this machine" when every host is the one daemon's.
  std::string HostLabel(int host) const;
  // An elastic job's rendezvous directory changed: the workers may all wait
  // to re-form after a failed collective.
  void OnElasticMarkers();
  // The agent of another machine (remote_hosts.h) exited or misspoke
  // (`why`): its workers are cut off from the rendezvous. As for a daemon
  // that died, the host is blacklisted, its workers stop, and the job
  // re-forms without it.
  void OnAgentLost(const std::string& host, const std::string& why);
  // Host `host` is lost to the job (`what`, then `consequence`, says how):
  // it is blacklisted, a world of daemons that spans it stops, and its
  // workers stop (SIGTERM, `what` said), so the others re-form without it.
  void LeaveOut(int host, const std::string& what, const std::string& consequence);
  void OnDaemonExit(int status);
  // Starts the discovery script every second, one run at a time, and
  // takes what a run listed once it is done (or past its deadline).
  void PollDiscovery(absl::Time now);
  // Grows or shrinks the job to the slots a run of the script listed.
  void OnDiscovery(absl::StatusOr<std::vector<DiscoveredHost>> hosts);
  // Stops the newest `count` workers of `host` that are not stopping already.
  void Retire(int count, int host, const std::string& why);
  // Workers of the latest generation on `host` that are not stopping.
  int LiveOn(int host) const;
  // With a daemon per host: once the job needs another world of daemons
  // and has left the old one, stops it and starts the new one.
  void MaybeStartDaemons();
  // Each host has a daemon of its own, in worlds the supervisor replaces.
  bool daemon_per_host() const { return worlds_ != nullptr; }
  // The daemons that serve the job now; null while none does.
  PrivateDaemon* serving() const { return worlds_ != nullptr ? worlds_->serving() : daemon_; }
  // A new world of daemons that came to serve is announced to the workers;
  // one that could not start stops the job.
  void AdvanceDaemons(absl::Time now);
  // Whether host discovery runs: an elastic job with a script that is
  // neither stopping nor finishing.
  bool Discovers() const;
  // A worker stopped for the discovery script that outlives its SIGTERM by
  // the grace period is killed.
  void KillRetiredPastGrace(absl::Time now);
  // The daemon of node `node` exited while the others ran. An elastic job
  // blacklists its host (as Horovod blacklists a failing host), stops its
  // workers and the other daemons, and re-forms without it; any other job
  // stops.
  void OnNodeLost(int node);
  // Sends `signal` to the running ranks and gives them `grace` to exit.
  void StopTrainers(int signal);
  void Fail(int exit_code);

  TrainerGroup& trainers_;
  // The launcher's daemons; with worlds_, only the first world, which
  // worlds_ replaces (serving() says which serves).
  PrivateDaemon* const daemon_;
  std::unique_ptr<DaemonWorlds> worlds_;                   // with launch_daemons
  std::optional<ElasticWorld::DaemonPlan> starting_plan_;  // the world worlds_ starts
  ElasticWorld* elastic_;
  const SignalWatcher& signals_;
  Options options_;
  // Hosts left out: a worker failed there, or the daemon died.
  HostBlacklist blacklist_;
  std::optional<int> exit_code_;  // set by the first failure
  bool stopping_ = false;
  bool signalled_ = false;  // a signal was forwarded; the next one kills
  std::optional<absl::Time> kill_deadline_;
  // Host discovery: when it runs next, the workers it stopped (their exit
  // re-forms the job without them), since when it lists fewer than
  // min_ranks slots, and what it last said went wrong.
  std::optional<absl::Time> next_discovery_;
  std::unique_ptr<DiscoveryRun> discovery_run_;  // the script, while it runs
  // Workers stopped for the discovery script: when SIGTERM went, cleared
  // once SIGKILL follows it (after --grace-seconds).
  std::map<int, std::optional<absl::Time>> retiring_;
  std::optional<absl::Time> short_since_;
  std::string last_discovery_error_;
  bool finishing_ = false;  // a worker exited 0
};

}  // namespace collective::launcher
