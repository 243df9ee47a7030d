#include "client/launcher/daemon_worlds.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace collective::launcher {
namespace {

void WakeBy(std::optional<absl::Time>& deadline, absl::Time when) {
  deadline = std::min(deadline.value_or(when), when);
}

}  // namespace

DaemonWorlds::DaemonWorlds(PrivateDaemon* first, Launch launch)
    : launch_(std::move(launch)), serving_(first) {}

DaemonWorlds::~DaemonWorlds() {
  for (Stopping& world : stopping_) world.daemon->Stop();
  if (starting_ != nullptr) starting_->Stop();
  if (owned_serving_ != nullptr) owned_serving_->Stop();
}

void DaemonWorlds::StopWorld(PrivateDaemon* daemon, std::unique_ptr<PrivateDaemon> owned,
                             bool world_lost) {
  daemon->RequestStop(world_lost);
  stopping_.push_back({daemon, std::move(owned)});
}

void DaemonWorlds::StopServing(bool world_lost) {
  if (serving_ == nullptr) return;
  StopWorld(serving_, std::move(owned_serving_), world_lost);
  serving_ = nullptr;
}

void DaemonWorlds::Replace(std::vector<std::string> sockets) {
  StopServing();
  queued_ = std::move(sockets);
}

void DaemonWorlds::Cancel() {
  queued_.reset();
  if (starting_ != nullptr) {
    PrivateDaemon* daemon = starting_.get();
    StopWorld(daemon, std::move(starting_));
    starting_exit_.reset();
  }
}

void DaemonWorlds::RemoteReady(const std::string& socket, pid_t pid) {
  if (starting_ != nullptr) starting_->RemoteReady(socket, pid);
}

void DaemonWorlds::RemoteExited(const std::string& socket, pid_t pid) {
  if (serving_ != nullptr) serving_->RemoteExited(socket, pid);
  if (starting_ != nullptr) starting_->RemoteExited(socket, pid);
}

void DaemonWorlds::Watch(PollSet& set, std::optional<absl::Time>& deadline) {
  for (Stopping& world : stopping_) {
    world.daemon->Watch(set, [](int) {});
    if (const std::optional<absl::Time> stop = world.daemon->stop_deadline()) {
      WakeBy(deadline, *stop);
    }
  }
  if (starting_ != nullptr) {
    starting_->Watch(set, [this](int status) { starting_exit_ = status; });
    starting_->WatchStart(set);
    WakeBy(deadline, starting_->start_deadline());
  }
  // The next world starts in Advance once the last stopping one exited:
  // its exit wakes the loop.
}

void DaemonWorlds::FinishStopped() {
  std::erase_if(stopping_, [](Stopping& world) {
    if (!world.daemon->exited()) return false;
    world.daemon->Stop();  // drains its output, removes its directory
    return true;
  });
}

std::optional<absl::Status> DaemonWorlds::Advance(absl::Time now) {
  for (Stopping& world : stopping_) world.daemon->KillIfPastStopDeadline(now);
  FinishStopped();
  if (queued_.has_value() && stopping_.empty() && starting_ == nullptr) {
    absl::StatusOr<std::unique_ptr<PrivateDaemon>> launched = launch_(*queued_);
    queued_.reset();
    if (!launched.ok()) return launched.status();
    starting_ = std::move(*launched);
    starting_exit_.reset();
    starting_since_ = now;
  }
  std::optional<absl::Status> started = AdvanceStart(now);
  FinishStopped();  // a world that failed to start and exited already
  return started;
}

std::optional<absl::Status> DaemonWorlds::AdvanceStart(absl::Time now) {
  if (starting_ == nullptr) return std::nullopt;
  std::optional<absl::Status> failed;
  if (starting_exit_.has_value() || (!starting_->ready() && now >= starting_->start_deadline())) {
    failed = starting_->StartFailed(starting_exit_);
  } else if (!starting_->ready()) {
    return std::nullopt;
  } else if (absl::Status served = starting_->Serve(); !served.ok()) {
    failed = served;
  }
  if (failed.has_value()) {
    PrivateDaemon* daemon = starting_.get();
    StopWorld(daemon, std::move(starting_));
    return failed;
  }
  last_start_ = absl::Now() - starting_since_;
  serving_ = starting_.get();
  owned_serving_ = std::move(starting_);
  return absl::OkStatus();
}

}  // namespace collective::launcher
