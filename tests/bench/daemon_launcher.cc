#include "tests/bench/daemon_launcher.h"

#include <cstring>
#include <filesystem>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "collective/v1/collective.grpc.pb.h"
#include "shm/segment_names.h"

namespace collective::bench {
namespace {

// Each Health attempt waits this long for the socket; between attempts the
// launcher checks that the daemon has not exited (a bad flag ends it at once).
constexpr absl::Duration kHealthAttempt = absl::Milliseconds(250);
constexpr absl::Duration kStopTimeout = absl::Seconds(20);
// After a failed stop, how long daemons get to go before they are killed.
constexpr absl::Duration kKillGrace = absl::Seconds(5);

std::unique_ptr<v1::CollectiveService::Stub> Connect(const std::string& socket) {
  // Short reconnect backoff: the socket appears within milliseconds of start.
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  return v1::CollectiveService::NewStub(
      grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), arguments));
}

absl::StatusOr<bool> ProbeHealth(v1::CollectiveService::Stub& stub, absl::Time deadline) {
  grpc::ClientContext context;
  context.set_wait_for_ready(true);
  context.set_deadline(absl::ToChronoTime(deadline));
  v1::HealthResponse response;
  const grpc::Status status = stub.Health(&context, {}, &response);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  return response.serving();
}

// OK once the daemon at `socket` answers Health and serves. `alive` says
// whether to keep trying; it returns why not when the daemon is gone.
template <class Alive>
absl::Status AwaitHealth(const std::string& socket, absl::Duration timeout, Alive alive) {
  auto stub = Connect(socket);
  const absl::Time deadline = absl::Now() + timeout;
  std::string last_error = "no answer";
  while (true) {
    const absl::StatusOr<bool> serving =
        ProbeHealth(*stub, std::min(deadline, absl::Now() + kHealthAttempt));
    if (serving.ok() && *serving) return absl::OkStatus();
    last_error =
        serving.ok() ? "it answers but does not serve" : std::string(serving.status().message());
    if (absl::Status gone = alive(); !gone.ok()) return gone;
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("collectived on ", socket,
                                                 " did not serve within ",
                                                 absl::FormatDuration(timeout), ": ", last_error));
    }
  }
}

// The pid of the daemon serving on `socket`, as it reports it: mpirun's
// children are not ours, and the pid of mpirun is not theirs.
absl::StatusOr<pid_t> DaemonPid(const std::string& socket) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::StatusResponse response;
  const grpc::Status status = Connect(socket)->Status(&context, {}, &response);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("collectived on ", socket, " does not say its pid: ", status.error_message()));
  }
  return static_cast<pid_t>(response.pid());
}

// A word for /bin/sh: single-quoted, each ' written as '\''.
std::string ShellQuote(const std::string& word) {
  return absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'");
}

// Removes the shared-memory objects of a daemon on `socket` (a killed daemon
// cannot): its segments and its liveness mark.
void RemoveSegments(const std::string& socket) {
  shm::SegmentNames(::geteuid(), socket, 0).RemoveAll();
}

}  // namespace

absl::Status DaemonLauncher::MakeDirectory() {
  // Short: a Unix socket path holds at most 107 bytes.
  char pattern[] = "/tmp/collective-bench-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) {
    return absl::InternalError("cannot create a directory for the daemons' sockets in /tmp");
  }
  directory_ = pattern;
  return absl::OkStatus();
}

absl::Status DaemonLauncher::AwaitServing(absl::Duration timeout, Interrupts& interrupts) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const std::string& socket : sockets_) {
    absl::Status healthy = AwaitHealth(socket, deadline - absl::Now(), [&]() -> absl::Status {
      if (process_->Wait(absl::ZeroDuration()).has_value()) {
        return absl::UnavailableError(
            absl::StrCat("collectived did not come up: ", ExitDescription()));
      }
      if (const std::optional<int> signal = interrupts.Take()) return Interrupted(*signal);
      return absl::OkStatus();
    });
    if (!healthy.ok()) {
      if (absl::IsCancelled(healthy) || process_->Wait(absl::ZeroDuration()).has_value()) {
        return healthy;
      }
      return absl::UnavailableError(
          absl::StrCat(healthy.message(), "; the log:\n", process_->Stderr()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DaemonLauncher>> DaemonLauncher::StartPrivate(
    const std::string& binary, const std::vector<std::string>& flags, absl::Duration timeout,
    Interrupts& interrupts) {
  std::error_code missing;
  if (!std::filesystem::is_regular_file(binary, missing)) {
    return absl::NotFoundError(absl::StrCat("collectived is not at ", binary,
                                            " (build it, or name a running one with --socket)"));
  }
  auto daemon = std::unique_ptr<DaemonLauncher>(new DaemonLauncher());
  if (absl::Status made = daemon->MakeDirectory(); !made.ok()) return made;
  daemon->sockets_ = {daemon->directory_ + "/collectived.sock"};
  std::vector<std::string> argv = {binary, "--socket", daemon->sockets_[0]};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto process = interrupts.Start(argv);
  if (!process.ok()) return process.status();
  daemon->process_ = std::make_unique<testing::Subprocess>(std::move(*process));
  if (absl::Status serving = daemon->AwaitServing(timeout, interrupts); !serving.ok()) {
    return serving;
  }
  return daemon;
}

absl::StatusOr<std::unique_ptr<DaemonLauncher>> DaemonLauncher::StartWorld(
    const std::vector<std::string>& mpirun, int nodes, const std::string& binary,
    const std::vector<std::string>& flags, absl::Duration timeout, Interrupts& interrupts) {
  std::error_code missing;
  if (!std::filesystem::is_regular_file(binary, missing)) {
    return absl::NotFoundError(absl::StrCat("collectived is not at ", binary, " (build it)"));
  }
  auto daemons = std::unique_ptr<DaemonLauncher>(new DaemonLauncher());
  if (absl::Status made = daemons->MakeDirectory(); !made.ok()) return made;
  for (int node = 0; node < nodes; ++node) {
    daemons->sockets_.push_back(absl::StrCat(daemons->directory_, "/node", node, ".sock"));
  }
  // Each rank of mpirun is one node's daemon, on a socket named after its
  // rank: the shell expands the rank in each rank's own environment.
  std::vector<std::string> words = {
      ShellQuote(binary), "--socket",
      ShellQuote(daemons->directory_ + "/node") + "\"$OMPI_COMM_WORLD_RANK\".sock"};
  for (const std::string& flag : flags) words.push_back(ShellQuote(flag));
  std::vector<std::string> argv = mpirun;
  argv.insert(argv.end(), {"/bin/sh", "-c", "exec " + absl::StrJoin(words, " ")});
  auto process = interrupts.Start(argv);
  if (!process.ok()) {
    return absl::Status(process.status().code(),
                        absl::StrCat("cannot start ", mpirun[0], ": ", process.status().message()));
  }
  daemons->process_ = std::make_unique<testing::Subprocess>(std::move(*process));
  daemons->by_mpirun_ = true;
  if (absl::Status serving = daemons->AwaitServing(timeout, interrupts); !serving.ok()) {
    return serving;
  }
  for (const std::string& socket : daemons->sockets_) {
    absl::StatusOr<pid_t> pid = DaemonPid(socket);
    if (!pid.ok()) return pid.status();
    daemons->world_.emplace_back(*pid);
    if (const PidFd& daemon = daemons->world_.back(); daemon.fd() < 0) {
      return absl::UnavailableError(absl::StrCat("cannot watch collectived on ", socket, " (pid ",
                                                 *pid,
                                                 "): pidfd_open: ", std::strerror(daemon.error())));
    }
  }
  return daemons;
}

absl::StatusOr<std::unique_ptr<DaemonLauncher>> DaemonLauncher::UseRunning(
    const std::string& socket, absl::Duration timeout) {
  auto daemon = std::unique_ptr<DaemonLauncher>(new DaemonLauncher());
  daemon->sockets_ = {socket};
  absl::Status healthy = AwaitHealth(socket, timeout, [] { return absl::OkStatus(); });
  if (!healthy.ok()) return healthy;
  return daemon;
}

DaemonLauncher::~DaemonLauncher() {
  if (process_ && !process_->Wait(absl::ZeroDuration()).has_value()) {
    // Only after a failed start or stop. mpirun ends its job on SIGTERM
    // (including daemons whose pids are not known yet); whatever is left
    // then is killed.
    for (const PidFd& daemon : world_) daemon.Signal(SIGTERM);
    process_->Signal(SIGTERM);
    process_->Wait(kKillGrace);
  }
  process_.reset();  // kills and reaps the daemon (or mpirun) still running
  for (const PidFd& daemon : world_) {
    daemon.Signal(SIGKILL);
    daemon.AwaitExit(kKillGrace);
  }
  if (!directory_.empty()) {
    for (const std::string& socket : sockets_) RemoveSegments(socket);
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
}

std::vector<pid_t> DaemonLauncher::pids() const {
  if (!process_) return {};
  if (!by_mpirun_) return {process_->pid()};
  std::vector<pid_t> pids;
  for (const PidFd& daemon : world_) pids.push_back(daemon.pid());
  return pids;
}

std::string DaemonLauncher::ExitDescription() {
  if (!process_) return "";
  const std::optional<int> status = process_->Wait(absl::ZeroDuration());
  if (!by_mpirun_) {
    return status.has_value() ? absl::StrCat("collectived ", process_->Describe(*status)) : "";
  }
  std::vector<std::string> gone;
  for (size_t node = 0; node < world_.size(); ++node) {
    if (world_[node].AwaitExit(absl::ZeroDuration())) {
      gone.push_back(absl::StrCat("node ", node, " (pid ", world_[node].pid(), ")"));
    }
  }
  if (status.has_value()) {
    return absl::StrCat("the daemons' mpirun ", process_->Describe(*status));
  }
  if (gone.empty()) return "";
  return absl::StrCat("the collectived of ", absl::StrJoin(gone, ", "),
                      " exited; the daemons' log so far:\n", process_->Stderr());
}

absl::Status DaemonLauncher::Stop() {
  if (!process_) return absl::OkStatus();
  // Several daemons are told to stop one by one, as a service manager would;
  // mpirun then exits with their status (a SIGTERM to mpirun would kill the
  // job instead).
  if (!by_mpirun_) process_->Signal(SIGTERM);
  for (const PidFd& daemon : world_) daemon.Signal(SIGTERM);
  const std::string what = by_mpirun_ ? "the daemons' mpirun" : "collectived";
  const std::optional<int> status = process_->Wait(kStopTimeout);
  if (!status.has_value()) {
    return absl::DeadlineExceededError(absl::StrCat(
        what, " (pid ", process_->pid(), ") did not exit within ",
        absl::FormatDuration(kStopTimeout), " of SIGTERM; the log:\n", process_->Stderr()));
  }
  if (!testing::ExitedCleanly(status)) {
    return absl::InternalError(
        absl::StrCat(what, " did not stop cleanly: ", process_->Describe(*status)));
  }
  return absl::OkStatus();
}

}  // namespace collective::bench
