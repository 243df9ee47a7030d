#include "client/launcher/job_supervisor.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/wait.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/launcher/launcher_output.h"

namespace collective::launcher {
namespace {

bool Succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string Ranks(int count) { return absl::StrCat(count, count == 1 ? " rank" : " ranks"); }

}  // namespace

JobSupervisor::JobSupervisor(TrainerGroup& trainers, PrivateDaemon* daemon, ElasticWorld* elastic,
                             const SignalWatcher& signals, Options options)
    : trainers_(trainers),
      daemon_(daemon),
      elastic_(elastic),
      signals_(signals),
      options_(std::move(options)),
      blacklist_(options_.blacklist_cooldown) {
  if (options_.launch_daemons) {
    worlds_ = std::make_unique<DaemonWorlds>(daemon_, options_.launch_daemons);
  }
}

JobSupervisor::~JobSupervisor() = default;

int JobSupervisor::Run() {
  while (trainers_.running() > 0) {
    MaybeStartDaemons();
    PollSet set;
    set.Add(signals_.fd(), [this] {
      while (const std::optional<int> signal = signals_.Take()) OnSignal(*signal);
    });
    trainers_.Watch(set, [this](Trainer& trainer) { OnTrainerExit(trainer); });
    if (PrivateDaemon* daemon = serving(); daemon != nullptr) {
      daemon->Watch(set, [this](int status) { OnDaemonExit(status); });
      if (!stopping_) daemon->WatchNodes(set, [this](int node) { OnNodeLost(node); });
    }
    if (elastic_ != nullptr && !stopping_) {
      set.Add(elastic_->watch_fd(), [this] {
        OnElasticMarkers();
        // What changed reaches the other machines' copies too.
        if (HostAgents* agents = elastic_->agents()) agents->Sync();
      });
    }
    if (elastic_ != nullptr && elastic_->agents() != nullptr) {
      elastic_->agents()->Watch(
          set, {.daemon_ready =
                    [this](const std::string& socket, pid_t pid) {
                      if (worlds_ != nullptr) worlds_->RemoteReady(socket, pid);
                    },
                .daemon_exited =
                    [this](const std::string& socket, pid_t pid) {
                      if (worlds_ != nullptr) worlds_->RemoteExited(socket, pid);
                    },
                .lost = [this](const std::string& host,
                               const std::string& why) { OnAgentLost(host, why); }});
    }
    const bool discovers = Discovers();
    if (!discovers) discovery_run_.reset();  // a run in flight is killed
    if (discovers && !next_discovery_.has_value() && discovery_run_ == nullptr) {
      next_discovery_ = absl::Now() + absl::Seconds(1);
    }
    std::optional<absl::Time> deadline = kill_deadline_;
    const auto wake_by = [&deadline](absl::Time when) {
      deadline = std::min(deadline.value_or(when), when);
    };
    if (worlds_ != nullptr) worlds_->Watch(set, deadline);
    for (const auto& [worker, stopped_at] : retiring_) {
      if (stopped_at.has_value()) wake_by(*stopped_at + options_.grace);
    }
    if (discovers) {
      // The script runs while the loop goes on: its output and exit are
      // among what the loop waits for.
      if (discovery_run_ != nullptr) discovery_run_->Watch(set);
      wake_by(discovery_run_ != nullptr ? discovery_run_->deadline() : *next_discovery_);
    }
    set.Wait(deadline);
    const absl::Time now = absl::Now();
    if (kill_deadline_.has_value() && now >= *kill_deadline_) {
      Say(absl::StrCat(Ranks(trainers_.running()), " still running after ",
                       absl::FormatDuration(options_.grace), "; sending SIGKILL"));
      trainers_.SignalRunning(SIGKILL);
      kill_deadline_.reset();
    }
    KillRetiredPastGrace(now);
    if (worlds_ != nullptr) AdvanceDaemons(now);
    // What the loop saw may have ended the job's growth (a worker that
    // finished): a listing read meanwhile must not start a new worker.
    if (Discovers()) {
      PollDiscovery(now);
    } else {
      discovery_run_.reset();
    }
  }
  trainers_.DrainOutput();
  worlds_.reset();  // stops the daemons it started, and any still stopping
  return exit_code_.value_or(0);
}

void JobSupervisor::KillRetiredPastGrace(absl::Time now) {
  for (auto& [worker, stopped_at] : retiring_) {
    if (!stopped_at.has_value() || now - *stopped_at < options_.grace) continue;
    for (const Trainer& trainer : trainers_.trainers()) {
      if (trainer.rank == worker) trainer.process.Signal(SIGKILL);
    }
    stopped_at.reset();
  }
}

bool JobSupervisor::Discovers() const {
  return options_.discovery != nullptr && elastic_ != nullptr && !stopping_ && !finishing_;
}

void JobSupervisor::MaybeStartDaemons() {
  if (worlds_ == nullptr || elastic_ == nullptr || stopping_ || worlds_->busy()) return;
  std::optional<ElasticWorld::DaemonPlan> plan = elastic_->DaemonsToStart();
  if (!plan.has_value()) return;
  // Every worker has left its job on the serving daemons: they stop, and
  // the new world starts once they exited, while the loop goes on.
  std::vector<std::string> sockets;
  for (int host : plan->hosts) sockets.push_back(elastic_->SocketOf(host));
  worlds_->Replace(std::move(sockets));
  starting_plan_ = std::move(plan);
}

void JobSupervisor::AdvanceDaemons(absl::Time now) {
  const std::optional<absl::Status> started = worlds_->Advance(now);
  if (!started.has_value() || stopping_) return;
  if (started->ok()) {
    const absl::Status said = elastic_->DaemonsStarted(*starting_plan_);
    if (said.ok()) {
      if (options_.verbose) {
        const size_t nodes = serving()->sockets().size();
        Say(absl::StrCat(serving()->Describe(), " started in ",
                         absl::FormatDuration(worlds_->last_start()), " for ", nodes,
                         nodes == 1 ? " node" : " nodes"));
      }
      return;
    }
    Say(absl::StrCat("cannot tell the workers that the daemons serve: ", said.message(),
                     "; stopping the ", Ranks(trainers_.running())));
  } else {
    Say(absl::StrCat("cannot start the job's daemons: ", started->message(), "; stopping the ",
                     Ranks(trainers_.running())));
  }
  Fail(1);
  StopTrainers(SIGTERM);
}

void JobSupervisor::OnNodeLost(int node) {
  if (!daemon_per_host()) {
    // A job of fixed nodes cannot go on without one.
    Say(absl::StrCat("the collectived of node ", node, " exited while the job ran; stopping the ",
                     Ranks(trainers_.running())));
    Fail(1);
    StopTrainers(SIGTERM);
    return;
  }
  const int host = elastic_->running_nodes()[static_cast<size_t>(node)];
  LeaveOut(host,
           absl::StrCat("the collectived of ", elastic_->HostName(host), " (node ", node, ")"),
           " exited while the job ran");
}

void JobSupervisor::OnSignal(int signal) {
  if (signal == SIGUSR1 && elastic_ != nullptr) {
    if (stopping_) return;
    if (options_.discovery != nullptr) {
      // The slots listed decide, and a worker past them would be stopped
      // at the next run.
      Say(absl::StrCat("SIGUSR1 adds no worker to a job on listed hosts: ",
                       options_.discovery->source(), " decides its slots"));
      return;
    }
    // On node 0's host.
    const int host = elastic_->workers().empty() ? 0 : elastic_->HostOf(elastic_->workers()[0]);
    const absl::StatusOr<std::string> added = elastic_->Add(trainers_, host);
    Say(added.ok() ? *added : added.status().message());
    return;
  }
  if (signalled_) {
    // A second signal: someone is in a hurry (Ctrl-C pressed again).
    Say(absl::StrCat("received ", SignalName(signal), " again; sending SIGKILL to ",
                     Ranks(trainers_.running())));
    trainers_.SignalRunning(SIGKILL);
    kill_deadline_.reset();
    return;
  }
  Say(absl::StrCat("received ", SignalName(signal), "; forwarding it to ",
                   Ranks(trainers_.running())));
  signalled_ = true;
  Fail(128 + signal);
  StopTrainers(signal);
}

void JobSupervisor::OnTrainerExit(const Trainer& trainer) {
  const int status = *trainer.process.status();
  const bool retired = retiring_.erase(trainer.rank) > 0;
  std::string how = DescribeExit(status);
  const bool ssh_ended = (WIFEXITED(status) && WEXITSTATUS(status) == 255) || WIFSIGNALED(status);
  if (retired && ssh_ended && elastic_ != nullptr) {
    // Its process is the ssh that collectiverun stopped (ssh says 255);
    // --remote-exec stops the worker there as the session ends.
    const int host = elastic_->HostOf(trainer.rank);
    if (elastic_->IsRemote(host)) {
      how = absl::StrCat("stopped (its ssh session to ", elastic_->HostName(host), " ended)");
    }
  }
  const std::string what = absl::StrCat(elastic_ != nullptr ? "worker " : "rank ", trainer.rank,
                                        " (pid ", trainer.process.pid(), ") ", how);
  if (elastic_ != nullptr) elastic_->Exited(trainer.rank);
  if (retired && !stopping_) {
    // Stopped for the listed slots or its host: not a failure.
    ReformWithout(trainer, what, /*replace=*/false, /*exit_code=*/1);
    return;
  }
  if (Succeeded(status) || stopping_) {
    // A worker that finished: the job is ending, and no longer grows or
    // shrinks (as Horovod's driver stops once a worker has succeeded).
    if (Succeeded(status)) finishing_ = true;
    if (options_.verbose) Say(what);
    return;
  }
  if (Discovers()) {
    BlacklistHostOf(trainer, status, what);
    return;
  }
  if (elastic_ != nullptr) {
    ReformWithout(trainer, what, /*replace=*/true, ShellExitCode(status));
    return;
  }
  StopOthers(what, ShellExitCode(status));
}

void JobSupervisor::ReformWithout(const Trainer& trainer, const std::string& what, bool replace,
                                  int exit_code) {
  if (AwaitSlotsWithout(trainer, what)) return;
  const absl::StatusOr<std::string> reformed = elastic_->Remove(trainer.rank, trainers_, replace);
  if (reformed.ok()) {
    Say(absl::StrCat(what, "; ", *reformed));
    return;
  }
  Say(absl::StrCat("cannot re-form the job without worker ", trainer.rank, ": ",
                   reformed.status().message()));
  StopOthers(what, exit_code);
}

void JobSupervisor::StopOthers(const std::string& what, int exit_code) {
  const int others = trainers_.running();
  Say(others > 0 ? absl::StrCat(what, "; stopping the other ", Ranks(others)) : what);
  Fail(exit_code);
  StopTrainers(SIGTERM);
}

void JobSupervisor::BlacklistHostOf(const Trainer& trainer, int status, const std::string& what) {
  const absl::Time now = absl::Now();
  const int host = elastic_->HostOf(trainer.rank);
  const std::optional<absl::Time> until = blacklist_.Add(host, now);
  const std::string blacklisted = absl::StrCat(what, "; blacklisting ", HostLabel(host), " ",
                                               HostBlacklist::Describe(until, now));
  const std::vector<int>& workers = elastic_->workers();
  const bool every_host_out = std::all_of(workers.begin(), workers.end(), [&](int worker) {
    return blacklist_.Contains(elastic_->HostOf(worker), now);
  });
  if (every_host_out) {
    // Horovod's driver stops once every host of the job is blacklisted.
    StopOthers(absl::StrCat(blacklisted, "; every host of the job is blacklisted"),
               ShellExitCode(status));
    return;
  }
  ReformWithout(trainer, blacklisted, /*replace=*/false, ShellExitCode(status));
  // Its other workers go too, as Horovod's driver stops a blacklisted
  // host's; the other hosts listed take the slots.
  if (!stopping_) Retire(LiveOn(host), host, absl::StrCat(HostLabel(host), " is blacklisted"));
}

bool JobSupervisor::AwaitSlotsWithout(const Trainer& trainer, const std::string& what) {
  const int left = static_cast<int>(elastic_->workers().size());
  if (!Discovers() || left >= options_.min_ranks) return false;
  elastic_->Withdraw(trainer.rank);
  if (!short_since_.has_value()) short_since_ = absl::Now();
  Say(absl::StrCat(what, "; ", left, left == 1 ? " worker remains" : " workers remain",
                   ", fewer than --min-np ", options_.min_ranks, ": waiting up to ",
                   absl::FormatDuration(absl::Ceil(
                       options_.elastic_timeout - (absl::Now() - *short_since_), absl::Seconds(1))),
                   " for slots to re-form the job"));
  return true;
}

std::string JobSupervisor::HostLabel(int host) const {
  return daemon_per_host() ? absl::StrCat("host ", elastic_->HostName(host)) : "this machine";
}

void JobSupervisor::OnAgentLost(const std::string& host_name, const std::string& why) {
  if (stopping_ || finishing_) return;
  LeaveOut(elastic_->HostNumber(host_name),
           absl::StrCat("collectiverun's agent on ", host_name, " ", why),
           "; the workers there can no longer rendezvous");
}

void JobSupervisor::LeaveOut(int host, const std::string& what, const std::string& consequence) {
  const absl::Time now = absl::Now();
  const std::optional<absl::Time> until = blacklist_.Add(host, now);
  Say(absl::StrCat(what, consequence, "; blacklisting the host ",
                   HostBlacklist::Describe(until, now), ", and re-forming the job without it"));
  // A world of daemons that spans the host is broken (its daemon there is
  // dead, or unwatched): the others stop now, and their workers'
  // collectives fail at once instead of at the node timeout.
  const std::vector<int>& nodes = elastic_->running_nodes();
  if (std::find(nodes.begin(), nodes.end(), host) != nodes.end()) {
    worlds_->StopServing(/*world_lost=*/true);
    elastic_->DaemonsLost();
  }
  Retire(LiveOn(host), host, absl::StrCat(what, consequence));
}

void JobSupervisor::OnElasticMarkers() {
  const absl::StatusOr<std::optional<std::string>> reformed =
      elastic_->OnDirectoryChanged(trainers_);
  if (reformed.ok() && !reformed->has_value()) return;
  if (reformed.ok()) {
    Say(**reformed);
    return;
  }
  Say(absl::StrCat("cannot re-form the job: ", reformed.status().message(), "; stopping the ",
                   Ranks(trainers_.running())));
  Fail(1);
  StopTrainers(SIGTERM);
}

void JobSupervisor::PollDiscovery(absl::Time now) {
  if (discovery_run_ == nullptr) {
    if (now < *next_discovery_) return;
    next_discovery_.reset();
    if (const std::vector<DiscoveredHost>* fixed = options_.discovery->fixed()) {
      OnDiscovery(*fixed);
      return;
    }
    absl::StatusOr<std::unique_ptr<DiscoveryRun>> run = options_.discovery->Begin();
    if (run.ok()) {
      discovery_run_ = std::move(*run);
    } else {
      OnDiscovery(run.status());
    }
    return;
  }
  if (!discovery_run_->done() && now < discovery_run_->deadline()) return;
  absl::StatusOr<std::vector<DiscoveredHost>> hosts = discovery_run_->Finish();
  discovery_run_.reset();
  OnDiscovery(std::move(hosts));
}

void JobSupervisor::OnDiscovery(absl::StatusOr<std::vector<DiscoveredHost>> hosts) {
  if (!hosts.ok()) {
    // Retried every second, as horovodrun does after the first run; said once.
    if (hosts.status().message() != last_discovery_error_) {
      last_discovery_error_ = std::string(hosts.status().message());
      Say(absl::StrCat(last_discovery_error_, "; keeping the job as it is"));
    }
    return;
  }
  last_discovery_error_.clear();
  // Blacklisted hosts are left out until their cooldown, if any, is over.
  const absl::Time now = absl::Now();
  for (int host : blacklist_.Resurrect(now)) {
    Say(absl::StrCat(HostLabel(host), "'s blacklist cooldown is over; it may run workers again"));
  }
  std::erase_if(*hosts, [&](const DiscoveredHost& host) {
    return daemon_per_host() && blacklist_.Contains(elastic_->HostNumber(host.name), now);
  });
  const int slots = TotalSlots(*hosts);
  if (slots < options_.min_ranks) {
    if (!short_since_.has_value()) {
      short_since_ = now;
      Say(absl::StrCat(options_.discovery->source(), " lists ", slots,
                       " slots, fewer than --min-np ", options_.min_ranks, "; waiting up to ",
                       absl::FormatDuration(options_.elastic_timeout), " for more"));
    } else if (now - *short_since_ >= options_.elastic_timeout) {
      Say(absl::StrCat(options_.discovery->source(), " has listed fewer than --min-np ",
                       options_.min_ranks, " slots for ",
                       absl::FormatDuration(options_.elastic_timeout), "; stopping the ",
                       Ranks(trainers_.running())));
      Fail(1);
      StopTrainers(SIGTERM);
    }
    return;
  }
  short_since_.reset();
  // Without a daemon per host, every host is the one daemon's.
  if (!daemon_per_host()) hosts = std::vector<DiscoveredHost>{{.name = "", .slots = slots}};
  // What each host should run, by host number in the order listed: its
  // slots, up to --max-np in all.
  std::vector<std::pair<int, int>> target;
  int budget = options_.max_ranks;
  for (const DiscoveredHost& host : *hosts) {
    const int wanted = std::min(host.slots, budget);
    target.emplace_back(daemon_per_host() ? elastic_->HostNumber(host.name) : 0, wanted);
    budget -= wanted;
  }
  const std::string listing =
      absl::StrCat(options_.discovery->source(), " lists ", slots, " slots");
  // Every host the job runs on, listed or not.
  std::set<int> running_on;
  for (int worker : elastic_->workers()) running_on.insert(elastic_->HostOf(worker));
  for (int host : running_on) {
    const int live = LiveOn(host);
    const auto listed = std::find_if(target.begin(), target.end(),
                                     [host](const auto& entry) { return entry.first == host; });
    const int wanted = listed != target.end() ? listed->second : 0;
    if (live > wanted) {
      Retire(live - wanted, host,
             wanted == 0 && daemon_per_host()
                 ? absl::StrCat(options_.discovery->source(), " no longer lists ",
                                elastic_->HostName(host))
                 : listing);
    }
  }
  // Added only once the stopped workers have gone, so that the job re-forms
  // once for the stops and once for the additions.
  if (!retiring_.empty()) return;
  // In one generation, as Horovod's driver starts every pending slot at
  // once: survivors waiting for --min-np join it whole.
  std::vector<int> to_add;
  for (const auto& [host, wanted] : target) {
    if (LiveOn(host) >= wanted) continue;
    // A machine that cannot be reached is left out, as Horovod's driver
    // blacklists a host it fails to start workers on; the others still grow
    // the job.
    if (absl::Status reached = elastic_->Reach(host); !reached.ok()) {
      const std::optional<absl::Time> until = blacklist_.Add(host, now);
      Say(absl::StrCat(reached.message(), "; blacklisting the host ",
                       HostBlacklist::Describe(until, now)));
      continue;
    }
    for (int live = LiveOn(host); live < wanted; ++live) to_add.push_back(host);
  }
  if (to_add.empty()) return;
  const absl::StatusOr<std::string> grown = elastic_->Add(trainers_, to_add);
  Say(grown.ok() ? absl::StrCat(listing, ": ", *grown) : grown.status().message());
}

int JobSupervisor::LiveOn(int host) const {
  int live = 0;
  for (int worker : elastic_->workers()) {
    if (elastic_->HostOf(worker) == host && !retiring_.contains(worker)) ++live;
  }
  return live;
}

void JobSupervisor::Retire(int count, int host, const std::string& why) {
  std::vector<int> newest_first;
  for (int worker : elastic_->workers()) {
    if (elastic_->HostOf(worker) == host && !retiring_.contains(worker)) {
      newest_first.push_back(worker);
    }
  }
  std::sort(newest_first.rbegin(), newest_first.rend());
  for (int worker : newest_first) {
    if (count == 0) break;
    for (const Trainer& trainer : trainers_.trainers()) {
      if (trainer.rank != worker || trainer.process.reaped()) continue;
      Say(absl::StrCat(why, ": stopping worker ", worker, " (pid ", trainer.process.pid(), ")"));
      retiring_[worker] = absl::Now();
      trainer.process.Signal(SIGTERM);
      --count;
      break;
    }
  }
}

void JobSupervisor::OnDaemonExit(int status) {
  Say(absl::StrCat(serving()->Describe(), " ", DescribeExit(status), " while the job ran",
                   stopping_ ? "" : "; stopping the ranks"));
  Fail(1);
  if (!stopping_) StopTrainers(SIGTERM);
}

void JobSupervisor::StopTrainers(int signal) {
  trainers_.SignalRunning(signal);
  if (worlds_ != nullptr) worlds_->Cancel();
  if (!stopping_) kill_deadline_ = absl::Now() + options_.grace;
  stopping_ = true;
}

void JobSupervisor::Fail(int exit_code) {
  if (!exit_code_.has_value()) exit_code_ = exit_code;
}

}  // namespace collective::launcher
