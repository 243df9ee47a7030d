#include "tests/bench/daemon_launcher.h"

#include <filesystem>

#include <signal.h>
#include <stdlib.h>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collective/v1/collective.grpc.pb.h"

namespace collective::bench {
namespace {

// Each Health attempt waits this long for the socket; between attempts the
// launcher checks that the daemon has not exited (a bad flag ends it at once).
constexpr absl::Duration kHealthAttempt = absl::Milliseconds(250);
constexpr absl::Duration kStopTimeout = absl::Seconds(20);

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
  // Short reconnect backoff: the socket appears within milliseconds of start.
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  auto stub = v1::CollectiveService::NewStub(
      grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), arguments));
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

}  // namespace

absl::StatusOr<std::unique_ptr<DaemonLauncher>> DaemonLauncher::StartPrivate(
    const std::string& binary, const std::vector<std::string>& flags, absl::Duration timeout,
    Interrupts& interrupts) {
  std::error_code missing;
  if (!std::filesystem::is_regular_file(binary, missing)) {
    return absl::NotFoundError(absl::StrCat("collectived is not at ", binary,
                                            " (build it, or name a running one with --socket)"));
  }
  auto daemon = std::unique_ptr<DaemonLauncher>(new DaemonLauncher());
  // Short: a Unix socket path holds at most 107 bytes.
  char pattern[] = "/tmp/collective-bench-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) {
    return absl::InternalError("cannot create a directory for the daemon's socket in /tmp");
  }
  daemon->directory_ = pattern;
  daemon->socket_ = daemon->directory_ + "/collectived.sock";
  std::vector<std::string> argv = {binary, "--socket", daemon->socket_};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto process = interrupts.Start(argv);
  if (!process.ok()) return process.status();
  daemon->process_ = std::make_unique<testing::Subprocess>(std::move(*process));
  absl::Status healthy = AwaitHealth(daemon->socket_, timeout, [&]() -> absl::Status {
    if (daemon->process_->Wait(absl::ZeroDuration()).has_value()) {
      return absl::UnavailableError(
          absl::StrCat("collectived did not come up: ", daemon->ExitDescription()));
    }
    if (const std::optional<int> signal = interrupts.Take()) return Interrupted(*signal);
    return absl::OkStatus();
  });
  if (!healthy.ok()) {
    if (absl::IsCancelled(healthy) || daemon->process_->Wait(absl::ZeroDuration()).has_value()) {
      return healthy;
    }
    return absl::UnavailableError(
        absl::StrCat(healthy.message(), "; its log:\n", daemon->process_->Stderr()));
  }
  return daemon;
}

absl::StatusOr<std::unique_ptr<DaemonLauncher>> DaemonLauncher::UseRunning(
    const std::string& socket, absl::Duration timeout) {
  auto daemon = std::unique_ptr<DaemonLauncher>(new DaemonLauncher());
  daemon->socket_ = socket;
  absl::Status healthy = AwaitHealth(socket, timeout, [] { return absl::OkStatus(); });
  if (!healthy.ok()) return healthy;
  return daemon;
}

DaemonLauncher::~DaemonLauncher() {
  process_.reset();  // kills and reaps a daemon still running
  if (!directory_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
}

std::string DaemonLauncher::ExitDescription() {
  if (!process_) return "";
  const std::optional<int> status = process_->Wait(absl::ZeroDuration());
  return status.has_value() ? absl::StrCat("collectived ", process_->Describe(*status)) : "";
}

absl::Status DaemonLauncher::Stop() {
  if (!process_) return absl::OkStatus();
  process_->Signal(SIGTERM);
  const std::optional<int> status = process_->Wait(kStopTimeout);
  if (!status.has_value()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "collectived (pid ", process_->pid(), ") did not exit within ",
        absl::FormatDuration(kStopTimeout), " of SIGTERM; its log:\n", process_->Stderr()));
  }
  if (!testing::ExitedCleanly(status)) {
    return absl::InternalError(
        absl::StrCat("collectived did not stop cleanly: ", process_->Describe(*status)));
  }
  return absl::OkStatus();
}

}  // namespace collective::bench
