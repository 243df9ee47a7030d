// HostAgents: the other machines of an elastic job (elastic_world.h), as
// collectiverun reaches them: over ssh, as mpirun does (the command of
// OMPI_MCA_plm_rsh_agent, else ssh; horovodrun's -p and -i), with
// collectiverun at the same path on every machine (as horovodrun expects of
// python and the script).
//
// A machine's workers rendezvous in a copy of the job's directory there,
// which a host agent keeps (host_agent.h), started at the first worker
// sent there. HostAgents sends it every file of the launcher's directory
// that it lacks or that changed (Sync), and writes into the launcher's
// directory each marker a worker wrote there; so every worker, wherever it
// runs, sees every file as on one machine. The agent also relays its
// machine's collectived: ready, and exited.
//
// A worker there runs as `ssh HOST 'cd DIR && exec env VARS... collectiverun
// --remote-exec GRACE -- COMMAND'`: a child of collectiverun like any other
// (its output, exit code and pidfd are those of ssh), stopped by stopping
// its ssh.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/launcher/agent_protocol.h"
#include "client/launcher/child_process.h"
#include "client/launcher/poll_set.h"
#include "client/launcher/prefixed_stream.h"
#include "client/launcher/rank_environment.h"

namespace collective::launcher {

struct RemoteShell {
  // ssh and its options, before the host.
  std::vector<std::string> ssh;
  // collectiverun, as every machine has it.
  std::string self;
  // From a remote worker's SIGTERM to its SIGKILL once its ssh ended.
  double grace_seconds = 10;
  // How long an agent may take to start (ssh's login included).
  absl::Duration start_timeout = absl::Seconds(30);
};

// `environment`'s OMPI_MCA_plm_rsh_agent (the ssh mpirun uses), split into
// words, else "ssh"; then -p `ssh_port` (unless 0) and -i `identity`
// (unless empty).
std::vector<std::string> SshCommand(const Environment& environment, int ssh_port,
                                    const std::string& identity);

// `word` quoted for a POSIX shell.
std::string ShellQuote(const std::string& word);

class HostAgents {
 public:
  // `hub`: the launcher's rendezvous directory; `environment`: the
  // launcher's, for ssh.
  HostAgents(std::string hub, RemoteShell shell, Environment environment);
  // Ends each agent's session (it cleans up and exits), up to 5 s each,
  // then kills what is left.
  ~HostAgents();
  HostAgents(const HostAgents&) = delete;
  HostAgents& operator=(const HostAgents&) = delete;

  // Where host number `number` keeps its copy of the directory:
  // <hub>-host<number>, and <hub>-host<number>-<k> for its k-th agent after
  // one was lost (what a lost agent left may still be there).
  std::string DirectoryOf(int number) const;
  // Starts the agent of `host` (number `number`) unless it runs, waits for
  // it to serve (up to the start timeout) and sends it every file. After
  // its agent was lost, a new one in a new directory.
  absl::Status Attach(int number, const std::string& host);

  // The command that runs `command` on `host` with `variables` (those a
  // job carries to another machine), as a remote worker.
  std::vector<std::string> WorkerCommand(const std::string& host, const Environment& variables,
                                         const std::vector<std::string>& command) const;
  const Environment& environment() const { return environment_; }

  // Sends each agent what is new or changed in the launcher's directory.
  void Sync();

  struct Events {
    std::function<void(const std::string& socket, pid_t pid)> daemon_ready;
    std::function<void(const std::string& socket, pid_t pid)> daemon_exited;
    // An agent exited, or said something no agent says: its workers can no
    // longer rendezvous.
    std::function<void(const std::string& host, const std::string& why)> lost;
  };
  // Adds each agent's output and exit to `set`.
  void Watch(PollSet& set, const Events& events);

 private:
  struct Agent {
    std::string host;
    std::string directory;
    ChildProcess process;  // ssh
    UniqueFd messages;     // its stdout
    AgentMessageReader reader;
    std::optional<PrefixedStream> errors;
    bool said_hello = false;                  // its directory is there
    std::map<std::string, std::string> sent;  // name -> content it has
    // What is yet to be written to its stdin (non-blocking: a machine that
    // hangs must not hold up collectiverun's loop).
    std::string outbox;
    bool lost = false;
  };

  // Reads what the agent said; false once it is lost (`why` says how).
  bool Read(Agent& agent, const Events* events, std::string& why);
  void Lose(Agent& agent, const std::string& why, const Events& events);
  void SyncOne(Agent& agent, const std::map<std::string, std::string>& files);
  // Writes what its stdin takes now of the agent's outbox.
  static void Flush(Agent& agent);
  std::map<std::string, std::string> HubFiles() const;

  std::string hub_;
  RemoteShell shell_;
  Environment environment_;
  std::map<int, std::unique_ptr<Agent>> agents_;  // by host number
  // Agents lost and replaced since, whose directories are removed at the
  // end; and how many each host number had.
  std::vector<std::unique_ptr<Agent>> replaced_;
  std::map<int, int> replacements_;
};

}  // namespace collective::launcher
