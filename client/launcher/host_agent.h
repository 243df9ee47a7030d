// The two parts of collectiverun that run on another machine of an elastic
// job, started there over ssh by collectiverun itself (remote_hosts.h):
//
// - The host agent (`collectiverun --host-agent DIRECTORY`) keeps the
//   machine's copy of the job's rendezvous directory (elastic_world.h):
//   it makes DIRECTORY (0700) and DIRECTORY/daemons, writes each file
//   collectiverun sends (atomically, as the launcher writes its own),
//   reports each marker a worker writes there (inotify), and relays its
//   collectived's readiness (an sd_notify socket, DIRECTORY/notify) and
//   exit (a pidfd). The messages are agent_protocol.h's, on stdin and
//   stdout. When its stdin ends (collectiverun stopped it, or the ssh
//   session broke) or a SIGTERM, SIGINT or SIGHUP comes, it removes the
//   directory and the shared memory of the daemons that served in it, and
//   exits 0.
//
// - The clean-up (`collectiverun --host-cleanup DIRECTORY`) of an agent that
//   was killed: removes what the agent would have, if DIRECTORY is what an
//   agent makes (named so, 0700, this user's).
//
// - A remote worker (`collectiverun --remote-exec GRACE -- COMMAND...`)
//   runs COMMAND (stdin /dev/null, a process group of its own) and exits
//   as it does (a signal N as 128 + N, which ssh passes on). ssh forwards
//   no signal, so the session is the worker's lifeline: once its stdin
//   ends (collectiverun stopped the worker's ssh, or died) the command
//   gets SIGTERM, and SIGKILL GRACE seconds later. SIGTERM, SIGINT and
//   SIGHUP are passed on to it.
#pragma once

#include <string>
#include <vector>

namespace collective::launcher {

// Each returns the process's exit code.
int RunHostAgent(const std::string& directory);
int RunHostCleanup(const std::string& directory);
int RunRemoteExec(double grace_seconds, const std::vector<std::string>& command);

}  // namespace collective::launcher
