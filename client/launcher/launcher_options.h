// The launcher's command line (CLI11), and what the environment adds to it.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "client/launcher/host_blacklist.h"
#include "client/launcher/host_discovery.h"
#include "client/launcher/rank_environment.h"

namespace collective::launcher {

struct LauncherOptions {
  // --check-build (-cb, horovodrun's): report what this installation
  // offers (check_build.h) instead of running a job.
  bool check_build = false;
  int ranks = 0;
  // The daemon to use; empty: a private one. --socket, else $COLLECTIVE_SOCKET.
  std::string socket;
  // The private daemon's binary; empty: next to collectiverun, else on PATH.
  std::string daemon;
  std::vector<std::string> daemon_args;
  // --job-id, else $COLLECTIVE_JOB_ID; empty: a fresh one per launch.
  std::string job_id;
  bool prefix_output = true;
  // -prefix-timestamp/--prefix-output-with-timestamp (horovodrun's).
  bool prefix_timestamp = false;
  // --output-filename DIR (horovodrun's): each rank's output also copied to
  // DIR/rank.<N>/stdout and stderr.
  std::string output_directory;
  double grace_seconds = 10;
  bool verbose = false;
  // --elastic: a failed worker is not fatal while min_ranks remain; the job
  // re-forms (ElasticWorld). min_ranks and max_ranks default to `ranks`.
  bool elastic = false;
  int min_ranks = 0;
  int max_ranks = 0;
  int restarts = 0;  // --restart-failed N
  // --reset-limit N: re-formations after which the job stops (Horovod's
  // option); -1: no limit.
  int reset_limit = -1;
  // --host-discovery-script (implies --elastic): the job grows and shrinks
  // to the slots it lists on this machine (host_discovery.h); a host
  // without ":slots" has --slots-per-host. Fewer slots than min_ranks are
  // waited out for --elastic-timeout (else $HOROVOD_ELASTIC_TIMEOUT, else
  // 600 s), then the job stops.
  std::string host_discovery_script;
  // -H/--hosts or --hostfile (horovodrun's): the hosts, each named once, in
  // the order listed; with several, each host the ranks are placed on
  // (filled in order, each up to its slots) is a node with a collectived of
  // its own (hosts of this machine: stand-in nodes). Empty: one node.
  std::vector<DiscoveredHost> hosts;
  std::string hosts_source;  // "-H" or "the hostfile": what listed them
  // horovodrun's flags for a job across machines, for its mpirun commands:
  // -p/--ssh-port and -i/--ssh-identity-file (mpirun's plm_rsh_args),
  // --network-interfaces (the interfaces the daemons' MPI and NCCL use),
  // --start-timeout (else $HOROVOD_START_TIMEOUT: how long a rank waits for
  // its host's daemon), --mpi-args (more mpirun arguments, split as the
  // shell would, without running anything).
  int ssh_port = 0;  // 0: ssh's own choice
  std::string ssh_identity_file;
  std::string network_interfaces;
  int start_timeout_seconds = 0;  // 0: not given
  std::vector<std::string> mpi_args;
  // --binding-args (horovodrun's): mpirun's binding for the ranks across
  // machines, in place of "--bind-to none".
  std::vector<std::string> binding_args;
  int slots_per_host = 1;
  int elastic_timeout_seconds = 0;  // 0: not given
  // --blacklist-cooldown-range MIN MAX (horovodrun's, with a discovery
  // script): a blacklisted host comes back after a cooldown within it
  // (host_blacklist.h); unset: it stays out for good.
  std::optional<CooldownRange> blacklist_cooldown;
  // horovodrun's tuning flags, as the HOROVOD_* variables they set
  // (horovodrun_flags.h); for the private daemon only.
  std::map<std::string, std::string> horovod_variables;
  // The trainer's command line: everything after the launcher's options.
  std::vector<std::string> command;
};

// Parses `args` (args[0] is the program). Returns the options, or the exit
// code to leave with at once: 0 after --help or --version (printed on
// `out`), 2 after a usage error (explained on `err`). mpirun's `-np N`
// means `-n N`. The command starts at the first argument that is neither an
// option nor an option's value, or after `--`; it keeps its own options.
std::variant<LauncherOptions, int> ParseLauncherOptions(std::vector<std::string> args,
                                                        std::ostream& out, std::ostream& err);

// Fills in what the command line left open from the environment (the socket,
// the job id) and refuses what cannot work: options for a private daemon
// together with a configured one, and running under an MPI launcher (which
// would make each node's private daemon try to join an MPI world, and the
// ranks' RANK/WORLD_SIZE wrong).
absl::Status ApplyEnvironment(const Environment& environment, LauncherOptions& options);

// An elastic job on hosts a discovery script or -H/--hostfile lists (the
// latter as a script that always lists them, Horovod's FixedHosts): its
// slots decide its size, a failed worker's host is blacklisted.
bool OnListedHosts(const LauncherOptions& options);

// Some of -H's (or --hostfile's) hosts are other machines: Open MPI's
// launcher starts a collectived on each host and the ranks (machines_job.h);
// never elastic.
bool OnOtherMachines(const LauncherOptions& options);

// The environment of the private daemon and the ranks: `environment` with
// the variables of horovodrun's flags set over it, as horovodrun sets them.
Environment JobEnvironment(const LauncherOptions& options, Environment environment);

}  // namespace collective::launcher
