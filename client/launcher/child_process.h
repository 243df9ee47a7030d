// ChildProcess: a trainer or the private daemon, as the launcher starts and
// watches it.
//
// fork+exec rather than posix_spawn, because the child must do two things
// before exec that posix_spawn cannot: ask for SIGTERM when the launcher
// dies (PR_SET_PDEATHSIG: a launcher killed with SIGKILL must not leave
// ranks or a daemon behind), and lead a process group of its own (so that
// stopping a rank also stops what it started, e.g. `sh -c` and its command,
// and so that a terminal's Ctrl-C reaches the launcher alone, which then
// stops the ranks first and the daemon last). An exec failure travels back
// through a close-on-exec pipe, so "no such command" is an error of Spawn.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "client/launcher/unique_fd.h"

namespace collective::launcher {

struct SpawnOptions {
  // argv[0] is looked up on PATH unless it contains a '/'.
  std::vector<std::string> argv;
  // The child's whole environment, "NAME=value".
  std::vector<std::string> environment;
  enum class Output {
    kInherit,        // the launcher's own stdout and stderr
    kSeparatePipes,  // a pipe for stdout and another for stderr
    kOnePipe,        // stdout and stderr into one pipe
  };
  Output output = Output::kInherit;
  // The child's stdin: /dev/null, or a pipe whose write end the launcher
  // holds (stdin()) until the child is reaped or destroyed: a child that
  // reads it sees its end only then (an ssh session to a remote worker,
  // whose end stops the worker).
  bool input_pipe = false;
};

class ChildProcess {
 public:
  // Starts the child; stdin is /dev/null unless `input_pipe`. Fails with NOT_FOUND when argv[0]
  // does not exist, PERMISSION_DENIED when it cannot be executed.
  static absl::StatusOr<ChildProcess> Spawn(const SpawnOptions& options);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // A child still running is killed (SIGKILL, with its process group) and
  // reaped: the safety net of error paths, not the way to stop a job.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Readable once the child has exited.
  int pidfd() const { return pidfd_.get(); }
  // The read ends of the output pipes (kOnePipe: stdout only), once.
  UniqueFd TakeStdout() { return std::move(stdout_); }
  UniqueFd TakeStderr() { return std::move(stderr_); }
  // The write end of its stdin (input_pipe), or -1.
  int stdin_fd() const { return stdin_.get(); }
  // Closes it: the child reads the end of its input.
  void CloseStdin() { stdin_.Reset(); }

  // Sends `signal` to the child's process group, unless it was reaped.
  void Signal(int signal) const;
  // Sends `signal` to the child alone (mpirun, whose ssh sessions to other
  // machines share its group and must stay up while it stops the ranks).
  void SignalChildOnly(int signal) const;
  // Reaps the child if it has exited; its wait status from then on.
  std::optional<int> TryReap();
  bool reaped() const { return status_.has_value(); }
  // The wait status once reaped.
  std::optional<int> status() const { return status_; }

 private:
  ChildProcess() = default;
  void KillAndReap();

  pid_t pid_ = -1;
  UniqueFd pidfd_;
  UniqueFd stdin_;
  UniqueFd stdout_;
  UniqueFd stderr_;
  std::optional<int> status_;
};

// "exited with code 3", "was killed by signal 9 (SIGKILL)".
std::string DescribeExit(int wait_status);
// A wait status as a shell reports it: the exit code, or 128 + the signal.
int ShellExitCode(int wait_status);
// "SIGTERM" (or "signal 64" for one without a name).
std::string SignalName(int signal);

}  // namespace collective::launcher
