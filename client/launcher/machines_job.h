// A job whose hosts (-H/--hostfile) include other machines, run as
// horovodrun runs one through mpirun: Open MPI's launcher (ssh, or the
// site's own: OMPI_MCA_plm_rsh_agent and the other plm settings apply)
// starts one collectived per host as an MPI world, and then the ranks, each
// with the environment a rank started on this machine gets (rank_environment.h)
// and the job's variables exported. collectiverun itself stays on this
// machine: it copies the daemons' output, forwards signals to the ranks'
// mpirun, and stops the daemons once the ranks have exited.
//
// The hosts must hold collectived and the command at the same paths as this
// machine (as horovodrun expects of python and the script). Each host's
// daemon listens on /tmp/collectiverun-<uid>-<tag>-node<N>.sock; its ranks
// wait for it there (COLLECTIVE_CONNECT_TIMEOUT_SECONDS, 60 unless set).
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "client/launcher/launcher_options.h"
#include "client/launcher/rank_environment.h"
#include "client/launcher/signal_watcher.h"

namespace collective::launcher {

struct MachinesJob {
  std::string job_id;
  // The job's nodes in rank order, and how many ranks each runs.
  std::vector<std::string> hosts;
  std::vector<int> local_sizes;
};

// mpirun and the flags each mpirun of a job across machines takes: more
// processes than slots, `binding` (none unless --binding-args: the ranks and
// the daemons share the hosts' cores), root allowed when collectiverun runs
// as root, horovodrun's flags as horovodrun passes them to mpirun, and
// (unless --verbose) --quiet when it starts daemons.
std::vector<std::string> MpirunForMachines(const LauncherOptions& options, bool daemons);
// Whether a job's variable is carried to another machine, as horovodrun
// decides: not the shell's functions, not OLDPWD, not a secret key; not
// Open MPI's and PMIx's own (mpirun passes its settings to the hosts
// itself), and not what each host has of its own.
bool ExportedToOtherMachines(absl::string_view name);
// -x NAME for each variable of `environment` that collectived reads
// (COLLECTIVED_*, HOROVOD_*, NCCL_*): for an app context of daemons.
std::vector<std::string> DaemonExports(const Environment& environment);
// The daemons' environment: the job's, logging warnings only unless
// --verbose or the environment says otherwise (as for a private daemon),
// and NCCL's interface as horovodrun sets it.
Environment DaemonEnvironment(const LauncherOptions& options, const Environment& environment);

// Runs the job to its end; returns collectiverun's exit code (that of
// mpirun for the ranks: the first failed rank's code; 128+N after a
// forwarded signal N; 1 when the daemons fail).
int RunOnMachines(const LauncherOptions& options, const MachinesJob& job,
                  const Environment& environment, const SignalWatcher& signals);

}  // namespace collective::launcher
