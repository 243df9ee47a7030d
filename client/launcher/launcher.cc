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
#include "client/launcher/job_supervisor.h"
#include "client/launcher/launcher_output.h"
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

int StartFailureCode(const absl::Status& status) {
  if (absl::IsNotFound(status)) return 127;
  if (absl::IsPermissionDenied(status)) return 126;
  return 1;
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
  const int most_ranks = options.elastic
                             ? std::max(options.ranks, options.max_ranks) + options.restarts
                             : options.ranks;
  if (absl::Status enough = RaiseFileLimit(most_ranks); !enough.ok()) {
    Say(enough.message());
    return 1;
  }
  JobIdentity job{.socket = options.socket,
                  .job_id = options.job_id.empty() ? UniqueJobId() : options.job_id,
                  .size = options.ranks};

  std::unique_ptr<PrivateDaemon> daemon;
  if (job.socket.empty()) {
    auto started = PrivateDaemon::Start(
        {.binary = options.daemon, .args = options.daemon_args, .verbose = options.verbose},
        environment, *signals);
    if (!started.ok()) {
      if (absl::IsCancelled(started.status())) {
        const int signal = signals->Take().value_or(SIGTERM);
        Say(absl::StrCat("received ", SignalName(signal), " while collectived started"));
        return 128 + signal;
      }
      Say(started.status().message());
      return StartFailureCode(started.status());
    }
    daemon = std::move(*started);
    job.socket = daemon->socket();
    if (options.verbose) {
      Say(absl::StrCat("collectived (pid ", daemon->pid(), ") serves ", job.socket));
    }
  } else {
    if (absl::Status listening = CheckDaemonListening(job.socket); !listening.ok()) {
      Say(listening.message());
      return 1;
    }
    if (options.verbose) Say(absl::StrCat("using the collectived on ", job.socket));
  }

  std::unique_ptr<ElasticWorld> elastic;
  absl::StatusOr<TrainerGroup> trainers = TrainerGroup();
  if (options.elastic) {
    auto world = ElasticWorld::Create({.min_ranks = options.min_ranks,
                                       .max_ranks = options.max_ranks,
                                       .restarts = options.restarts,
                                       .reset_limit = options.reset_limit},
                                      job, environment, options.command, options.prefix_output);
    if (!world.ok()) {
      Say(world.status().message());
      return 1;
    }
    elastic = std::move(*world);
    if (absl::Status started = elastic->Start(*trainers); !started.ok()) trainers = started;
  } else {
    trainers = TrainerGroup::Start(options.command, job, environment, options.prefix_output);
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
  JobSupervisor supervisor(
      *trainers, daemon.get(), elastic.get(), *signals,
      {.grace = absl::Seconds(options.grace_seconds), .verbose = options.verbose});
  const int exit_code = supervisor.Run();
  if (daemon != nullptr) daemon->Stop();
  return exit_code;
}

}  // namespace collective::launcher
