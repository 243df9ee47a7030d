// Tells systemd (Type=notify) what the daemon is doing: READY=1 once the
// socket accepts requests, STATUS= (what `systemctl status` shows) whenever
// the job's state changes, STOPPING=1 on shutdown, WATCHDOG=1 while the
// engine turns (watchdog.h). A no-op when the daemon
// does not run under systemd (no NOTIFY_SOCKET). Never waits for the
// receiver: a notification it has no room for is dropped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "daemon/job/job.h"

namespace collective::daemon::observe {

void NotifyReady(absl::string_view status);
void NotifyStatus(absl::string_view status);
void NotifyStopping(absl::string_view status);
// WATCHDOG=1 alone (no STATUS=).
void NotifyWatchdog();

// The STATUS= line for the daemon's job (null: none): "idle, serving
// SOCKET", "job 'x' forming: 1 of 4 local ranks registered", "job 'x'
// running with 4 clients", "job 'x' failed (...): 2 clients left to go".
std::string DescribeForSystemd(const job::Job* job, absl::string_view socket);

// Sends STATUS= when what DescribeForSystemd says would change.
class JobStatusNotifier {
 public:
  explicit JobStatusNotifier(std::string socket) : socket_(std::move(socket)) {}

  // Engine thread, every turn of its loop: compares a few numbers and sends
  // nothing unless one changed. The first call with no job sends nothing,
  // since READY=1 carried the idle line.
  void Observe(const job::Job* job);

 private:
  struct Seen {
    uint64_t job_sequence = 0;  // 0: no job
    job::JobState state = job::JobState::kForming;
    int32_t registered = 0;
    int32_t attached = 0;
    friend bool operator==(const Seen&, const Seen&) = default;
  };

  const std::string socket_;
  Seen seen_;
};

}  // namespace collective::daemon::observe
