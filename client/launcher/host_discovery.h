// HostDiscovery: Horovod's --host-discovery-script contract. The script
// prints the hosts the job may use, one "host[:slots]" per line (slots: how
// many workers the host takes; without it, --slots); collectiverun runs it
// when the job starts and every second after, and grows or shrinks an
// elastic job to what it lists (JobSupervisor). collectiverun starts the
// workers of this machine only, so every host listed must be this machine
// (localhost, a loopback address, or its own name). Each name is a node of
// its own, as Horovod treats it (it would ssh to 127.0.0.1 as to another
// machine): collectiverun runs one collectived per name, an MPI world of
// stand-in nodes when there are several (ElasticWorld). An elastic job on
// -H's or --hostfile's hosts has a HostDiscovery of fixed hosts, which every
// run lists, as Horovod's FixedHosts.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/launcher/child_process.h"
#include "client/launcher/poll_set.h"
#include "client/launcher/rank_environment.h"
#include "client/launcher/unique_fd.h"

namespace collective::launcher {

struct DiscoveredHost {
  std::string name;
  int slots = 0;
};

// The script's output as hosts; INVALID_ARGUMENT names a line that is not
// "host" or "host:slots" with slots a positive number.
absl::StatusOr<std::vector<DiscoveredHost>> ParseDiscoveredHosts(absl::string_view output,
                                                                 int default_slots);

// localhost, a loopback address (127.0.0.0/8, ::1), or this machine's name.
bool IsThisMachine(absl::string_view host);

// `hosts` with a name listed twice merged (its slots add up) and the order
// of first mention kept.
std::vector<DiscoveredHost> MergeHosts(const std::vector<DiscoveredHost>& hosts);

// MergeHosts of `hosts`, every one of them this machine; UNIMPLEMENTED
// names the first that is not this machine (`source` says where it was
// listed, e.g. "the host discovery script").
absl::StatusOr<std::vector<DiscoveredHost>> HostsOfThisMachine(
    const std::vector<DiscoveredHost>& hosts, absl::string_view source);

// The slots of `hosts` added up.
int TotalSlots(const std::vector<DiscoveredHost>& hosts);

// horovodrun's -H/--hosts ("host1:2,host2:4"; a host without ":slots" has
// one) and --hostfile (lines "host slots=N", '#' comments) as hosts.
absl::StatusOr<std::vector<DiscoveredHost>> ParseHostsOption(absl::string_view list);
absl::StatusOr<std::vector<DiscoveredHost>> ParseHostfile(absl::string_view text);

// One run of the discovery script, driven by the caller's poll loop (as
// Horovod runs discovery on a thread of its own, so that a slow script
// never holds up the job's output and signals): its stdout and stderr are
// read together as they come, its exit seen through its pidfd.
class DiscoveryRun {
 public:
  // Adds to `set` the pipes still open and the script's exit.
  void Watch(PollSet& set);
  // It exited and its output is read to the end.
  bool done() const { return child_.reaped() && !out_.valid() && !err_.valid(); }
  absl::Time deadline() const { return deadline_; }
  // What the script listed (as HostDiscovery::ListHosts says), once
  // done(); before, DEADLINE_EXCEEDED, and the script is killed.
  absl::StatusOr<std::vector<DiscoveredHost>> Finish();

 private:
  friend class HostDiscovery;
  DiscoveryRun(ChildProcess child, std::string script, int default_slots, absl::Duration timeout,
               bool other_machines);
  // Appends what `fd` has to `sink`; closes it at its end.
  static void Pump(UniqueFd& fd, std::string& sink);

  ChildProcess child_;
  UniqueFd out_;
  UniqueFd err_;
  std::string output_;
  std::string errors_;
  std::string script_;
  int default_slots_;
  absl::Duration timeout_;
  absl::Time deadline_;
  bool other_machines_;
};

class HostDiscovery {
 public:
  HostDiscovery(std::string script, int default_slots, Environment environment)
      : script_(std::move(script)),
        default_slots_(default_slots),
        environment_(std::move(environment)) {}
  // horovodrun's fixed hosts (-H or --hostfile in an elastic job): what
  // every run lists, without a script, as Horovod's FixedHosts discovery.
  // `source` names them in messages ("-H").
  HostDiscovery(std::vector<DiscoveredHost> fixed, std::string source)
      : default_slots_(1), fixed_(std::move(fixed)), source_(std::move(source)) {}

  // Hosts of other machines may be listed (an elastic job across
  // machines); without, a listing that names one fails.
  void AllowOtherMachines() { other_machines_ = true; }

  // Runs the script (its stderr kept for the error) and returns the hosts
  // it lists (MergeHosts; HostsOfThisMachine unless AllowOtherMachines).
  // Fails when the script cannot start, exits non-zero, prints a malformed
  // line or another machine's host (unless allowed), or takes longer than
  // `timeout` (it is then killed).
  absl::StatusOr<std::vector<DiscoveredHost>> ListHosts(
      absl::Duration timeout = absl::Seconds(10)) const;
  // Starts the script, for the caller's poll loop to drive; fails when it
  // cannot start. Not for fixed hosts.
  absl::StatusOr<std::unique_ptr<DiscoveryRun>> Begin(
      absl::Duration timeout = absl::Seconds(10)) const;

  const std::string& script() const { return script_; }
  // The fixed hosts, or null for a script.
  const std::vector<DiscoveredHost>* fixed() const {
    return fixed_.has_value() ? &*fixed_ : nullptr;
  }
  // What lists the hosts, for messages: "the host discovery script", "-H".
  const std::string& source() const { return source_; }

 private:
  std::string script_;
  int default_slots_;
  Environment environment_;
  std::optional<std::vector<DiscoveredHost>> fixed_;
  std::string source_ = "the host discovery script";
  bool other_machines_ = false;
};

}  // namespace collective::launcher
