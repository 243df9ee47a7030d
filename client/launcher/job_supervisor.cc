#include "client/launcher/job_supervisor.h"

#include <signal.h>
#include <sys/wait.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/launcher/launcher_output.h"

namespace collective::launcher {
namespace {

bool Succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string Ranks(int count) { return absl::StrCat(count, count == 1 ? " rank" : " ranks"); }

}  // namespace

JobSupervisor::JobSupervisor(TrainerGroup& trainers, PrivateDaemon* daemon, ElasticWorld* elastic,
                             const SignalWatcher& signals, Options options)
    : trainers_(trainers),
      daemon_(daemon),
      elastic_(elastic),
      signals_(signals),
      options_(options) {}

int JobSupervisor::Run() {
  while (trainers_.running() > 0) {
    PollSet set;
    set.Add(signals_.fd(), [this] {
      while (const std::optional<int> signal = signals_.Take()) OnSignal(*signal);
    });
    trainers_.Watch(set, [this](Trainer& trainer) { OnTrainerExit(trainer); });
    if (daemon_ != nullptr) daemon_->Watch(set, [this](int status) { OnDaemonExit(status); });
    if (elastic_ != nullptr && !stopping_) {
      set.Add(elastic_->watch_fd(), [this] { OnElasticMarkers(); });
    }
    if (!set.Wait(kill_deadline_)) {
      Say(absl::StrCat(Ranks(trainers_.running()), " still running after ",
                       absl::FormatDuration(options_.grace), "; sending SIGKILL"));
      trainers_.SignalRunning(SIGKILL);
      kill_deadline_.reset();
    }
  }
  trainers_.DrainOutput();
  return exit_code_.value_or(0);
}

void JobSupervisor::OnSignal(int signal) {
  if (signal == SIGUSR1 && elastic_ != nullptr) {
    if (stopping_) return;
    const absl::StatusOr<std::string> added = elastic_->Add(trainers_);
    Say(added.ok() ? *added : added.status().message());
    return;
  }
  if (signalled_) {
    // A second signal: someone is in a hurry (Ctrl-C pressed again).
    Say(absl::StrCat("received ", SignalName(signal), " again; sending SIGKILL to ",
                     Ranks(trainers_.running())));
    trainers_.SignalRunning(SIGKILL);
    kill_deadline_.reset();
    return;
  }
  Say(absl::StrCat("received ", SignalName(signal), "; forwarding it to ",
                   Ranks(trainers_.running())));
  signalled_ = true;
  Fail(128 + signal);
  StopTrainers(signal);
}

void JobSupervisor::OnTrainerExit(const Trainer& trainer) {
  const int status = *trainer.process.status();
  const std::string what =
      absl::StrCat(elastic_ != nullptr ? "worker " : "rank ", trainer.rank, " (pid ",
                   trainer.process.pid(), ") ", DescribeExit(status));
  if (elastic_ != nullptr) elastic_->Exited(trainer.rank);
  if (Succeeded(status) || stopping_) {
    if (options_.verbose) Say(what);
    return;
  }
  if (elastic_ != nullptr && ReformWithout(trainer, what)) return;
  const int others = trainers_.running();
  Say(others > 0 ? absl::StrCat(what, "; stopping the other ", Ranks(others)) : what);
  Fail(ShellExitCode(status));
  StopTrainers(SIGTERM);
}

bool JobSupervisor::ReformWithout(const Trainer& trainer, const std::string& what) {
  if (stopping_) return false;
  const absl::StatusOr<std::string> reformed = elastic_->Remove(trainer.rank, trainers_);
  if (reformed.ok()) {
    Say(absl::StrCat(what, "; ", *reformed));
    return true;
  }
  Say(absl::StrCat("cannot re-form the job without worker ", trainer.rank, ": ",
                   reformed.status().message()));
  return false;
}

void JobSupervisor::OnElasticMarkers() {
  const absl::StatusOr<std::optional<std::string>> reformed =
      elastic_->OnDirectoryChanged(trainers_);
  if (reformed.ok() && !reformed->has_value()) return;
  if (reformed.ok()) {
    Say(**reformed);
    return;
  }
  Say(absl::StrCat("cannot re-form the job: ", reformed.status().message(), "; stopping the ",
                   Ranks(trainers_.running())));
  Fail(1);
  StopTrainers(SIGTERM);
}

void JobSupervisor::OnDaemonExit(int status) {
  Say(absl::StrCat("collectived (pid ", daemon_->pid(), ") ", DescribeExit(status),
                   " while the job ran", stopping_ ? "" : "; stopping the ranks"));
  Fail(1);
  if (!stopping_) StopTrainers(SIGTERM);
}

void JobSupervisor::StopTrainers(int signal) {
  trainers_.SignalRunning(signal);
  if (!stopping_) kill_deadline_ = absl::Now() + options_.grace;
  stopping_ = true;
}

void JobSupervisor::Fail(int exit_code) {
  if (!exit_code_.has_value()) exit_code_ = exit_code;
}

}  // namespace collective::launcher
