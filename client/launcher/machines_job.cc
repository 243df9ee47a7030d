#include "client/launcher/machines_job.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/launcher/child_process.h"
#include "client/launcher/daemon_runner.h"
#include "client/launcher/launcher_output.h"
#include "client/launcher/poll_set.h"
#include "client/launcher/prefixed_stream.h"

namespace collective::launcher {
namespace {

// How long the daemons may take to drain and exit once the ranks have.
constexpr absl::Duration kDaemonStopTimeout = absl::Seconds(10);
// Then how long mpirun may take to kill them.
constexpr absl::Duration kDaemonKillTimeout = absl::Seconds(5);
// How often the daemons are asked to stop meanwhile.
constexpr absl::Duration kStopSignalInterval = absl::Seconds(1);
// How long a rank waits for its host's daemon unless --start-timeout,
// $HOROVOD_START_TIMEOUT or the environment says.
constexpr char kConnectTimeoutSeconds[] = "60";

bool IsVariableName(absl::string_view name) {
  return !name.empty() && !absl::ascii_isdigit(name.front()) &&
         std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

// -x NAME for each variable of `environment` that `take` selects: once per
// app context, the one it applies to.
template <class Select>
std::vector<std::string> Exports(const Environment& environment, Select take) {
  std::vector<std::string> exports;
  for (const auto& [name, value] : environment) {
    if (!take(name)) continue;
    exports.push_back("-x");
    exports.push_back(name);
  }
  return exports;
}

// A tag no other job of this user shares, for the sockets' names.
std::string SocketTag() {
  uint64_t random = 0;
  if (::getrandom(&random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
    random = static_cast<uint64_t>(absl::GetCurrentTimeNanos()) ^ static_cast<uint64_t>(::getpid());
  }
  return absl::StrFormat("%u-%016x", ::geteuid(), random);
}

std::string Describe(const std::vector<std::string>& argv) { return absl::StrJoin(argv, " "); }

class MachinesSupervisor {
 public:
  MachinesSupervisor(const LauncherOptions& options, const SignalWatcher& signals,
                     ChildProcess daemons, ChildProcess ranks)
      : options_(options),
        signals_(signals),
        daemons_(std::move(daemons)),
        ranks_(std::move(ranks)),
        daemon_output_(daemons_.TakeStdout(), "[collectived] ", STDERR_FILENO) {}

  int Run() {
    while (!ranks_.reaped()) Step(kill_ranks_at_);
    // The ranks are gone: their daemons go too. mpirun forwards SIGUSR2 to
    // each, which stops it as SIGTERM does; a SIGTERM to mpirun would kill
    // them before they meet in MPI_Finalize. Sent again every second, for
    // a daemon mpirun started after the last one (ranks can end before
    // every daemon runs). Past the timeout: mpirun's SIGTERM, then SIGKILL.
    const absl::Time stop_by = absl::Now() + kDaemonStopTimeout;
    while (!daemons_.reaped() && absl::Now() < stop_by) {
      daemons_.SignalChildOnly(SIGUSR2);
      const absl::Time again = std::min(stop_by, absl::Now() + kStopSignalInterval);
      while (!daemons_.reaped() && Step(again)) {
      }
    }
    if (!daemons_.reaped()) {
      Say(absl::StrCat("the job's daemons (mpirun pid ", daemons_.pid(), ") did not stop within ",
                       absl::FormatDuration(kDaemonStopTimeout),
                       "; sending SIGTERM to their mpirun"));
      daemons_.SignalChildOnly(SIGTERM);
      const absl::Time kill_by = absl::Now() + kDaemonKillTimeout;
      while (!daemons_.reaped() && Step(kill_by)) {
      }
      if (!daemons_.reaped()) daemons_.Signal(SIGKILL);
    }
    daemon_output_.Drain();
    if (signalled_.has_value()) return 128 + *signalled_;
    return daemons_failed_ ? 1 : ShellExitCode(*ranks_.status());
  }

 private:
  // One wait; false when `deadline` passed first.
  bool Step(std::optional<absl::Time> deadline) {
    PollSet set;
    set.Add(signals_.fd(), [this] {
      while (const std::optional<int> signal = signals_.Take()) OnSignal(*signal);
    });
    if (daemon_output_.open()) set.Add(daemon_output_.fd(), [this] { daemon_output_.Pump(); });
    if (!daemons_.reaped()) {
      set.Add(daemons_.pidfd(), [this] {
        if (daemons_.TryReap().has_value()) OnDaemonsExit();
      });
    }
    if (!ranks_.reaped()) set.Add(ranks_.pidfd(), [this] { ranks_.TryReap(); });
    const bool woke = set.Wait(deadline);
    // Whatever woke the wait (the daemons' output may never fall silent).
    if (kill_ranks_at_.has_value() && absl::Now() >= *kill_ranks_at_) {
      Say(absl::StrCat("the ranks did not stop within ", options_.grace_seconds,
                       " s; sending SIGKILL to their mpirun"));
      ranks_.Signal(SIGKILL);
      kill_ranks_at_.reset();
    }
    return woke;
  }

  void OnSignal(int signal) {
    if (signalled_.has_value()) {
      Say(absl::StrCat("received ", SignalName(signal), " again; sending SIGKILL to the ranks"));
      ranks_.Signal(SIGKILL);
      return;
    }
    Say(absl::StrCat("received ", SignalName(signal), "; forwarding it to the ranks' mpirun"));
    signalled_ = signal;
    ranks_.SignalChildOnly(signal);
    kill_ranks_at_ = absl::Now() + absl::Seconds(options_.grace_seconds);
  }

  void OnDaemonsExit() {
    if (ranks_.reaped()) return;
    daemon_output_.Drain();
    Say(absl::StrCat("the job's daemons (mpirun pid ", daemons_.pid(), ") ",
                     DescribeExit(*daemons_.status()), " while the ranks ran; stopping them"));
    daemons_failed_ = true;
    ranks_.SignalChildOnly(SIGTERM);
    kill_ranks_at_ = absl::Now() + absl::Seconds(options_.grace_seconds);
  }

  const LauncherOptions& options_;
  const SignalWatcher& signals_;
  ChildProcess daemons_;
  ChildProcess ranks_;
  PrefixedStream daemon_output_;
  std::optional<int> signalled_;
  std::optional<absl::Time> kill_ranks_at_;
  bool daemons_failed_ = false;
};

std::vector<std::string> DaemonsMpirunArgv(const LauncherOptions& options, const MachinesJob& job,
                                           const std::vector<std::string>& sockets,
                                           const Environment& environment) {
  std::vector<std::string> argv = MpirunForMachines(options, /*daemons=*/true);
  const std::vector<std::string> exports = DaemonExports(DaemonEnvironment(options, environment));
  const std::string binary = CollectivedBinary(options.daemon);
  for (size_t node = 0; node < job.hosts.size(); ++node) {
    if (node > 0) argv.push_back(":");
    argv.insert(argv.end(), exports.begin(), exports.end());
    for (const std::string& arg :
         {std::string("-H"), job.hosts[node], std::string("-np"), std::string("1"), binary,
          std::string("--socket"), sockets[node]}) {
      argv.push_back(arg);
    }
    argv.insert(argv.end(), options.daemon_args.begin(), options.daemon_args.end());
  }
  return argv;
}

std::vector<std::string> RanksMpirunArgv(const LauncherOptions& options, const MachinesJob& job,
                                         const std::vector<std::string>& sockets,
                                         const Environment& environment) {
  // horovodrun's --binding-args replace its binding, for the ranks only
  // (the daemons share their host's cores with them).
  std::vector<std::string> argv = MpirunForMachines(options, /*daemons=*/false);
  // horovodrun's: "[1,<rank>]<stdout>:" before each line, and mpirun's
  // own output files.
  if (options.prefix_output) argv.push_back("--tag-output");
  if (options.prefix_timestamp) argv.push_back("--timestamp-output");
  if (!options.output_directory.empty()) {
    argv.push_back("--output-filename");
    argv.push_back(options.output_directory);
  }
  const std::vector<std::string> exports = Exports(environment, ExportedToOtherMachines);
  int rank = 0;
  for (size_t node = 0; node < job.hosts.size(); ++node) {
    for (int local = 0; local < job.local_sizes[node]; ++local, ++rank) {
      if (rank > 0) argv.push_back(":");
      argv.insert(argv.end(), exports.begin(), exports.end());
      for (const std::string& arg : {std::string("-H"), job.hosts[node], std::string("-np"),
                                     std::string("1"), std::string("env")}) {
        argv.push_back(arg);
      }
      // What a rank on this machine gets, set on the rank's host by env(1):
      // mpirun's -x carries one value to every rank.
      Environment own = RankEnvironment({}, sockets[node], job.job_id, job.hosts[node],
                                        PlaceRank(job.local_sizes, rank));
      if (options.start_timeout_seconds != 0) {
        own["COLLECTIVE_CONNECT_TIMEOUT_SECONDS"] = absl::StrCat(options.start_timeout_seconds);
      } else if (environment.count("COLLECTIVE_CONNECT_TIMEOUT_SECONDS") == 0) {
        own["COLLECTIVE_CONNECT_TIMEOUT_SECONDS"] = kConnectTimeoutSeconds;
      }
      for (const std::string& variable : ToEnvp(own)) argv.push_back(variable);
      argv.insert(argv.end(), options.command.begin(), options.command.end());
    }
  }
  return argv;
}

}  // namespace

std::vector<std::string> MpirunForMachines(const LauncherOptions& options, bool daemons) {
  std::vector<std::string> argv = {COLLECTIVE_MPIEXEC, "--oversubscribe"};
  // horovodrun's --binding-args replace its binding, for the ranks only
  // (the daemons share their host's cores with them).
  if (daemons || options.binding_args.empty()) {
    argv.insert(argv.end(), {"--bind-to", "none"});
  } else {
    argv.insert(argv.end(), options.binding_args.begin(), options.binding_args.end());
  }
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  std::vector<std::string> ssh;
  if (options.ssh_port != 0) ssh.push_back(absl::StrCat("-p ", options.ssh_port));
  if (!options.ssh_identity_file.empty()) ssh.push_back("-i " + options.ssh_identity_file);
  if (!ssh.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_args", absl::StrJoin(ssh, " ")});
  if (!options.network_interfaces.empty()) {
    argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", options.network_interfaces, "--mca",
                             "oob_tcp_if_include", options.network_interfaces});
  }
  argv.insert(argv.end(), options.mpi_args.begin(), options.mpi_args.end());
  // Without mpirun's own notes ("Forwarding signal 12 to job" when they
  // stop), as the daemons log warnings only, unless --verbose.
  if (daemons && !options.verbose) argv.push_back("--quiet");
  return argv;
}

bool ExportedToOtherMachines(absl::string_view name) {
  return IsVariableName(name) && name != "_" && name != "OLDPWD" && name != "HOSTNAME" &&
         name != "PWD" && !absl::EndsWith(name, "_SECRET_KEY") &&
         !absl::StartsWith(name, "OMPI_") && !absl::StartsWith(name, "PMIX_") &&
         !absl::StartsWith(name, "SSH_");
}

std::vector<std::string> DaemonExports(const Environment& environment) {
  return Exports(environment, [](absl::string_view name) {
    return absl::StartsWith(name, "COLLECTIVED_") || absl::StartsWith(name, "HOROVOD_") ||
           absl::StartsWith(name, "NCCL_");
  });
}

Environment DaemonEnvironment(const LauncherOptions& options, const Environment& environment) {
  Environment daemons = environment;
  if (!options.verbose) daemons.emplace("COLLECTIVED_LOG_LEVEL", "warn");
  // As horovodrun sets it for NCCL, which runs in the daemons here.
  if (!options.network_interfaces.empty()) {
    daemons["NCCL_SOCKET_IFNAME"] = options.network_interfaces;
  }
  return daemons;
}

int RunOnMachines(const LauncherOptions& options, const MachinesJob& job,
                  const Environment& environment, const SignalWatcher& signals) {
  const std::string tag = SocketTag();
  std::vector<std::string> sockets;
  for (size_t node = 0; node < job.hosts.size(); ++node) {
    sockets.push_back(absl::StrCat("/tmp/collectiverun-", tag, "-node", node, ".sock"));
  }
  const std::vector<std::string> daemons_argv =
      DaemonsMpirunArgv(options, job, sockets, environment);
  if (options.verbose) Say(absl::StrCat("starting the daemons: ", Describe(daemons_argv)));
  auto daemons =
      ChildProcess::Spawn({.argv = daemons_argv,
                           .environment = ToEnvp(DaemonEnvironment(options, environment)),
                           .output = SpawnOptions::Output::kOnePipe});
  if (!daemons.ok()) {
    Say(absl::StrCat("cannot start the daemons: ", daemons.status().message()));
    return 1;
  }
  const std::vector<std::string> ranks_argv = RanksMpirunArgv(options, job, sockets, environment);
  if (options.verbose) Say(absl::StrCat("starting the ranks: ", Describe(ranks_argv)));
  auto ranks = ChildProcess::Spawn({.argv = ranks_argv, .environment = ToEnvp(environment)});
  if (!ranks.ok()) {
    Say(absl::StrCat("cannot start the ranks: ", ranks.status().message()));
    return 1;  // the daemons' mpirun is killed with its process group (~ChildProcess)
  }
  return MachinesSupervisor(options, signals, std::move(*daemons), std::move(*ranks)).Run();
}

}  // namespace collective::launcher
