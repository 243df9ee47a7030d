// A real collectived for integration tests: started from build/bin on a
// socket in its own temporary directory, waited for until it answers, and
// stopped with SIGTERM. Also: starting client worker processes against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/v1/status.pb.h"
#include "tests/common/subprocess.h"

namespace collective::testing {

class DaemonProcess {
 public:
  struct Options {
    std::vector<std::string> flags;  // e.g. {"--fusion-threshold-bytes", "1048576"}
    std::map<std::string, std::string> environment;
    // The socket directory's mode (0700 by default; 0755 lets other uids in).
    int directory_mode = 0700;
    // An existing socket path to use instead of a fresh directory.
    std::string socket;
  };

  // Starts the daemon and waits (up to 20 s) until it answers Health.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start() { return Start(Options{}); }
  ~DaemonProcess();

  const std::string& socket() const { return socket_; }
  const std::string& directory() const { return directory_; }
  Subprocess& process() { return *process_; }

  // SIGTERM, then the exit status (nullopt if it did not exit within 20 s).
  std::optional<int> Stop();

  absl::StatusOr<v1::StatusResponse> Status() const;
  // Polls Status until `predicate` holds or the timeout passes.
  template <class Predicate>
  absl::StatusOr<v1::StatusResponse> AwaitStatus(Predicate predicate, absl::Duration timeout) const;

  // Shared-memory objects under /dev/shm named for this daemon's socket.
  std::vector<std::string> Segments() const;

  // Starts one worker per local rank: `worker` (a path) with `args`, with
  // COLLECTIVE_SOCKET, LOCAL_RANK and LOCAL_SIZE set.
  absl::StatusOr<std::vector<Subprocess>> StartWorkers(
      const std::string& worker, int local_size, const std::vector<std::string>& args,
      const std::map<std::string, std::string>& environment = {}) const;
  // Starts one worker as local rank `local_rank` of `local_size`, for tests
  // that start the ranks of a job one by one or leave some out.
  absl::StatusOr<Subprocess> StartWorker(
      const std::string& worker, int local_rank, int local_size,
      const std::vector<std::string>& args,
      const std::map<std::string, std::string>& environment = {}) const;

 private:
  DaemonProcess() = default;

  std::string directory_;
  bool own_directory_ = false;
  std::string socket_;
  std::unique_ptr<Subprocess> process_;
};

template <class Predicate>
absl::StatusOr<v1::StatusResponse> DaemonProcess::AwaitStatus(Predicate predicate,
                                                              absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<v1::StatusResponse> status = Status();
  while (!(status.ok() && predicate(*status))) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          status.ok() ? "the daemon never reached the expected state: " + status->DebugString()
                      : std::string(status.status().message()));
    }
    // Polling against a deadline; the pause keeps the poll from starving the
    // daemon of the CPU it needs to get there.
    absl::SleepFor(absl::Milliseconds(5));
    status = Status();
  }
  return status;
}

// Waits until the daemon on `socket` answers Health (gRPC retries until the
// socket exists), up to `timeout`.
absl::Status AwaitHealthy(const std::string& socket, absl::Duration timeout);

// The shared-memory segments in /dev/shm of the daemon on `socket` (of this
// uid), whatever its epoch.
std::vector<std::string> SegmentsOf(const std::string& socket);
// Removes them, unless a daemon listens on `socket` (a successor, which
// owns its own): what a daemon the test killed (or that died) could not
// remove itself, so that /dev/shm does not fill up run after run.
void RemoveSegmentsOf(const std::string& socket);
// The Status RPC of the daemon on `socket`.
absl::StatusOr<v1::StatusResponse> QueryStatus(const std::string& socket);

// What a process holds, from /proc/<pid>: its resident memory in KiB (-1
// if it cannot be read) and its open descriptors (for leak checks).
int64_t ResidentKib(pid_t pid);
size_t OpenDescriptors(pid_t pid);

// For AwaitStatus: whether tensor `name` is pending with exactly
// `ready_ranks` ranks submitted (so a job is known to block on it).
bool HasPending(const v1::StatusResponse& status, const std::string& name, int ready_ranks);

// Flags for a daemon whose segments stay small (1 MiB arena per client, a
// 4 MiB result segment): the daemon allocates segments up front, and tests
// that move little data should not pay for, or fill /dev/shm with, the
// production defaults. Append further flags after these.
std::vector<std::string> SmallMemoryFlags();

// How many times `what` occurs in `text` (overlapping ones too).
size_t Occurrences(const std::string& text, const std::string& what);

// A job of two test workers that blocks: rank 1 ("victim") submits a tensor
// rank 0 never submits, and rank 0 waits on one rank 1 never submits. Ending
// it (EndStuckJob) kills the victim, which fails the job on rank 0 ("...
// disconnected ..."); then the daemon is idle again. "" when that all
// happened within `timeout`, else what did not.
struct StuckJob {
  Subprocess victim;
  Subprocess waiter;
};
absl::StatusOr<StuckJob> StartStuckJob(const DaemonProcess& daemon);
// Both ranks of a stuck job are blocked: rank 0 waits on 'stuck' and the
// victim on 'victim'. Until then the victim may still be connecting.
bool StuckJobBlocked(const v1::StatusResponse& status);
std::string EndStuckJob(StuckJob& job, const DaemonProcess& daemon, absl::Duration timeout);

// Waits for every worker (up to `timeout` in all) and returns "" if all
// exited 0, else a description of each failure.
std::string WaitForWorkers(std::vector<Subprocess>& workers, absl::Duration timeout);

// A command run to completion: its exit code (-1 if it did not exit within
// the timeout, or was killed), stdout and stderr.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& environment = {},
                         absl::Duration timeout = absl::Seconds(15));
// collectivectl --socket SOCKET ARGS...
CommandResult RunCollectivectl(const std::string& socket, const std::vector<std::string>& args);

// Where a binary of the build is: its path in the build tree, or, when
// COLLECTIVE_BUNDLE_DIR is set (a relocated bundle, scripts/gpu-bundle.sh),
// the file of the same name in its bin/.
std::string BuiltBinary(const std::string& built);
// The binaries the tests start (their build-tree paths set by CMake).
std::string CollectivedBinary();
std::string CollectivectlBinary();
std::string TestWorkerBinary();

}  // namespace collective::testing
