#include "client/launcher/launcher.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include <signal.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/launcher/daemon_runner.h"
#include "client/launcher/elastic_world.h"
#include "client/launcher/host_discovery.h"
#include "client/launcher/job_supervisor.h"
#include "client/launcher/launcher_output.h"
#include "client/launcher/machines_job.h"
#include "client/launcher/poll_set.h"
#include "client/launcher/remote_hosts.h"
#include "client/launcher/signal_watcher.h"
#include "client/launcher/trainer_group.h"

namespace collective::launcher {
namespace {

// Unique per launch, so that a job never joins what is left of another on a
// shared daemon, and recognisable in `collectivectl status`.
std::string UniqueJobId() {
  uint32_t random = 0;
  if (::getrandom(&random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
    random = static_cast<uint32_t>(absl::GetCurrentTimeNanos());
  }
  return absl::StrFormat("collectiverun-%d-%08x", ::getpid(), random);
}

// Each rank costs the launcher three descriptors (two pipes and a pidfd),
// and poll() refuses more descriptors than the soft limit (often 1024).
absl::Status RaiseFileLimit(int ranks) {
  const rlim_t needed = static_cast<rlim_t>(ranks) * 3 + 64;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= needed) return absl::OkStatus();
  if (limit.rlim_max < needed) {
    return absl::ResourceExhaustedError(absl::StrCat(ranks, " ranks need ", needed,
                                                     " open files, but the limit is ",
                                                     limit.rlim_max, " (ulimit -n)"));
  }
  limit.rlim_cur = needed;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  return absl::OkStatus();
}

// The hosts the discovery lists, once their slots are at least
// `ranks` (-np, as horovodrun's driver waits for; the script runs every
// second meanwhile, for up to
// `timeout`). Its first run must succeed, as horovodrun requires; later
// failures are retried. CANCELLED when a forwarded signal arrives (it stays
// pending on `signals`).
absl::StatusOr<std::vector<DiscoveredHost>> AwaitSlots(const HostDiscovery& discovery, int ranks,
                                                       absl::Duration timeout,
                                                       const SignalWatcher& signals) {
  absl::StatusOr<std::vector<DiscoveredHost>> hosts = discovery.ListHosts();
  if (!hosts.ok()) return hosts.status();
  const absl::Time deadline = absl::Now() + timeout;
  bool said = false;
  while (!hosts.ok() || TotalSlots(*hosts) < ranks) {
    const std::string listed =
        hosts.ok() ? absl::StrCat(" (it lists ", TotalSlots(*hosts), ")") : "";
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(discovery.source(), " did not list -np ", ranks, " slots within ",
                       absl::FormatDuration(timeout),
                       hosts.ok() ? listed : absl::StrCat(": ", hosts.status().message())));
    }
    if (!said) {
      Say(absl::StrCat("waiting up to ", absl::FormatDuration(timeout), " for ", discovery.source(),
                       " to list -np ", ranks, " slots", listed));
      said = true;
    }
    bool signalled = false;
    PollSet set;
    set.Add(signals.fd(), [&] { signalled = true; });
    set.Wait(std::min(deadline, absl::Now() + absl::Seconds(1)));
    if (signalled) return absl::CancelledError("a signal arrived");
    hosts = discovery.ListHosts();
  }
  return hosts;
}

// The host of each of the first `workers`: hosts filled in the order
// listed, each up to its slots.
std::vector<std::string> PlaceWorkers(const std::vector<DiscoveredHost>& hosts, int workers) {
  std::vector<std::string> placed;
  for (const DiscoveredHost& host : hosts) {
    for (int slot = 0; slot < host.slots && static_cast<int>(placed.size()) < workers; ++slot) {
      placed.push_back(host.name);
    }
  }
  return placed;
}

int StartFailureCode(const absl::Status& status) {
  if (absl::IsNotFound(status)) return 127;
  if (absl::IsPermissionDenied(status)) return 126;
  return 1;
}

// Says why the job could not start and returns the exit code: 128 + the
// signal that cancelled `while` (CANCELLED), else `code`.
int ReportStartFailure(const absl::Status& status, const SignalWatcher& signals,
                       absl::string_view while_doing, int code) {
  if (absl::IsCancelled(status)) {
    const int signal = signals.Take().value_or(SIGTERM);
    Say(absl::StrCat("received ", SignalName(signal), " while ", while_doing));
    return 128 + signal;
  }
  Say(status.message());
  return code;
}

}  // namespace

int RunJob(const LauncherOptions& options, const Environment& environment) {
  auto signals = SignalWatcher::Start(options.elastic);
  if (!signals.ok()) {
    Say(signals.status().message());
    return 1;
  }
  // An elastic job may start up to --max-np workers, and more to replace
  // failed ones, whose descriptors the launcher keeps until the job ends.
  // A discovery script without --max-np may grow the job without bound, as
  // in Horovod: room for 256 workers then (a machine runs fewer).
  int most_ranks = options.elastic ? std::max(options.ranks, options.max_ranks) + options.restarts
                                   : options.ranks;
  const bool listed_hosts = OnListedHosts(options);
  if (listed_hosts) most_ranks = std::min(most_ranks, 256);
  if (absl::Status enough = RaiseFileLimit(most_ranks); !enough.ok()) {
    Say(enough.message());
    return 1;
  }
  JobIdentity job{.socket = options.socket,
                  .job_id = options.job_id.empty() ? UniqueJobId() : options.job_id,
                  .size = options.ranks};

  std::unique_ptr<HostDiscovery> discovery;
  // The hosts of the first ranks: the discovery script's, else -H's.
  std::vector<std::string> first_hosts;
  if (!options.host_discovery_script.empty()) {
    discovery = std::make_unique<HostDiscovery>(options.host_discovery_script,
                                                options.slots_per_host, environment);
  } else if (listed_hosts) {
    // An elastic job on fixed hosts: as on a script that always lists them.
    discovery = std::make_unique<HostDiscovery>(options.hosts, options.hosts_source);
  }
  // A job on its own daemons may reach other machines (over ssh); one on a
  // configured daemon serves this machine only.
  if (discovery != nullptr && job.socket.empty()) discovery->AllowOtherMachines();
  if (discovery != nullptr) {
    const absl::StatusOr<std::vector<DiscoveredHost>> hosts = AwaitSlots(
        *discovery, options.ranks, absl::Seconds(options.elastic_timeout_seconds), *signals);
    if (!hosts.ok()) {
      return ReportStartFailure(hosts.status(), *signals, "waiting for slots", /*code=*/1);
    }
    // As horovodrun's driver: every slot listed, up to --max-np.
    job.size = std::min(TotalSlots(*hosts), options.max_ranks);
    first_hosts = PlaceWorkers(*hosts, job.size);
  } else {
    first_hosts = PlaceWorkers(options.hosts, job.size);
  }
  // The job's nodes: the hosts its ranks go on, each a node with a
  // collectived of its own (hosts of this machine: stand-in nodes; a
  // configured daemon serves them all as one).
  std::vector<std::string> node_hosts;
  std::vector<int> local_sizes;
  for (size_t rank = 0; rank < first_hosts.size(); ++rank) {
    if (rank == 0 || first_hosts[rank] != first_hosts[rank - 1]) {
      node_hosts.push_back(first_hosts[rank]);
      local_sizes.push_back(0);
    }
    ++local_sizes.back();
  }
  if (OnOtherMachines(options) && !options.elastic) {
    return RunOnMachines(options,
                         {.job_id = job.job_id, .hosts = node_hosts, .local_sizes = local_sizes},
                         environment, *signals);
  }
  if (node_hosts.size() == 1) job.host = node_hosts.front();
  // An elastic job whose hosts may be several: its ElasticWorld places the
  // workers, and the supervisor starts the daemons of each generation's.
  const bool daemon_per_host =
      job.socket.empty() && options.elastic && (discovery != nullptr || local_sizes.size() > 1);
  // Any other job on several: their daemons, started here as one MPI world.
  const bool several_nodes = job.socket.empty() && !options.elastic && local_sizes.size() > 1;
  const PrivateDaemonOptions daemon_options{
      .binary = options.daemon,
      .args = options.daemon_args,
      .verbose = options.verbose,
      .nodes = several_nodes ? static_cast<int>(local_sizes.size()) : 1};

  std::unique_ptr<PrivateDaemon> daemon;
  if (daemon_per_host) {
    // Started with the elastic world, whose hosts name their sockets.
  } else if (job.socket.empty()) {
    auto started = PrivateDaemon::Start(daemon_options, environment, *signals);
    if (!started.ok()) {
      return ReportStartFailure(started.status(), *signals, "collectived started",
                                StartFailureCode(started.status()));
    }
    daemon = std::move(*started);
    job.socket = daemon->socket();
    if (options.verbose) {
      Say(absl::StrCat(daemon->Describe(), daemon->sockets().size() == 1 ? " serves " : " serve ",
                       absl::StrJoin(daemon->sockets(), ", ")));
    }
  } else {
    if (absl::Status listening = CheckDaemonListening(job.socket); !listening.ok()) {
      Say(listening.message());
      return 1;
    }
    if (options.verbose) Say(absl::StrCat("using the collectived on ", job.socket));
  }

  // Rank numbers padded for the largest the job may reach (an elastic job's
  // workers are numbered on past it, and their files sort by number less).
  const OutputOptions output{
      .prefix = options.prefix_output,
      .timestamp = options.prefix_timestamp,
      .directory = options.output_directory,
      .rank_digits = static_cast<int>(absl::StrCat(std::max(1, most_ranks - 1)).size())};
  std::unique_ptr<ElasticWorld> elastic;
  absl::StatusOr<TrainerGroup> trainers = TrainerGroup();
  if (options.elastic) {
    std::optional<RemoteShell> remote;
    if (daemon_per_host) {
      // Hosts of other machines, listed now or later, are reached over ssh.
      remote =
          RemoteShell{.ssh = SshCommand(environment, options.ssh_port, options.ssh_identity_file),
                      .self = CollectiverunBinary(),
                      .grace_seconds = options.grace_seconds,
                      .start_timeout = absl::Seconds(
                          options.start_timeout_seconds != 0 ? options.start_timeout_seconds : 30)};
    }
    auto world = ElasticWorld::Create({.min_ranks = options.min_ranks,
                                       .max_ranks = options.max_ranks,
                                       .restarts = options.restarts,
                                       .reset_limit = options.reset_limit,
                                       .daemon_per_host = daemon_per_host,
                                       .remote = std::move(remote)},
                                      job, environment, options.command, output);
    if (!world.ok()) {
      Say(world.status().message());
      return 1;
    }
    elastic = std::move(*world);
    std::vector<int> hosts;
    // With another machine among the first hosts, the supervisor starts the
    // first world too, once their agents serve (the workers wait for it).
    const bool first_here =
        std::all_of(node_hosts.begin(), node_hosts.end(),
                    [](const std::string& host) { return IsThisMachine(host); });
    if (daemon_per_host) {
      for (const std::string& host : first_hosts) hosts.push_back(elastic->HostNumber(host));
    }
    if (daemon_per_host && first_here) {
      // The first world of daemons serves before the workers start (a
      // trainer that registers at once finds its daemon); the supervisor
      // starts the later ones.
      PrivateDaemonOptions first_daemons = daemon_options;
      for (const std::string& host : node_hosts) {
        first_daemons.sockets.push_back(elastic->SocketOf(elastic->HostNumber(host)));
      }
      auto started = PrivateDaemon::Start(first_daemons, environment, *signals);
      if (!started.ok()) {
        return ReportStartFailure(started.status(), *signals, "collectived started",
                                  StartFailureCode(started.status()));
      }
      daemon = std::move(*started);
    }
    if (absl::Status started = elastic->Start(*trainers, hosts); !started.ok()) {
      trainers = started;
    } else if (daemon_per_host && first_here) {
      if (absl::Status said = elastic->DaemonsStarted(); !said.ok()) trainers = said;
    }
  } else if (several_nodes) {
    trainers = TrainerGroup::StartOnNodes(options.command, job.job_id, node_hosts,
                                          daemon->sockets(), local_sizes, environment, output);
  } else {
    trainers = TrainerGroup::Start(options.command, job, environment, output);
  }
  if (!trainers.ok()) {
    Say(trainers.status().message());
    return StartFailureCode(trainers.status());
  }
  if (options.verbose) {
    std::vector<std::string> pids;
    for (const Trainer& trainer : trainers->trainers()) {
      pids.push_back(absl::StrCat(trainer.process.pid()));
    }
    Say(absl::StrCat(
        "job '", job.job_id, "': ",
        job.size == 1 ? "rank 0 is pid " : absl::StrCat("ranks 0-", job.size - 1, " are pids "),
        absl::StrJoin(pids, ", "), ": ", absl::StrJoin(options.command, " ")));
  }
  JobSupervisor::Options supervisor_options{
      .grace = absl::Seconds(options.grace_seconds),
      .verbose = options.verbose,
      .discovery = discovery.get(),
      .min_ranks = options.min_ranks,
      .max_ranks = options.max_ranks,
      .elastic_timeout = absl::Seconds(options.elastic_timeout_seconds),
      .blacklist_cooldown = options.blacklist_cooldown};
  if (daemon_per_host) {
    supervisor_options.launch_daemons = [&](const std::vector<std::string>& sockets) {
      PrivateDaemonOptions world = daemon_options;
      world.sockets = sockets;
      for (const std::string& socket : sockets) {
        const int host = elastic->HostOfSocket(socket).value_or(0);
        const bool remote = elastic->IsRemote(host);
        world.hosts.push_back(remote ? elastic->HostName(host) : "");
        world.remote_notify.push_back(remote ? elastic->DirectoryOf(host) + "/notify" : "");
      }
      // Used only with another machine among the hosts.
      world.mpirun = MpirunForMachines(options, /*daemons=*/true);
      world.exports = DaemonExports(DaemonEnvironment(options, environment));
      return PrivateDaemon::Launch(world, environment);
    };
  }
  JobSupervisor supervisor(*trainers, daemon.get(), elastic.get(), *signals, supervisor_options);
  const int exit_code = supervisor.Run();
  if (daemon != nullptr) daemon->Stop();
  return exit_code;
}

}  // namespace collective::launcher
