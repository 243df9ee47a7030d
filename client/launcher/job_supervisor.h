// JobSupervisor: watches a running job until every rank has exited, in one
// poll loop: copies the ranks' output, forwards signals, and stops the job
// when a rank fails or the private daemon dies.
#pragma once

#include <optional>

#include "absl/time/time.h"
#include "client/launcher/daemon_runner.h"
#include "client/launcher/signal_watcher.h"
#include "client/launcher/trainer_group.h"

namespace collective::launcher {

class JobSupervisor {
 public:
  struct Options {
    // From SIGTERM (or the forwarded signal) to SIGKILL for ranks being stopped.
    absl::Duration grace = absl::Seconds(10);
    bool verbose = false;
  };

  // `daemon` is null when the job uses a daemon the launcher did not start.
  JobSupervisor(TrainerGroup& trainers, PrivateDaemon* daemon, const SignalWatcher& signals,
                Options options);

  // Returns once every rank has exited, with the launcher's exit code: 0 if
  // every rank exited 0; else that of the first failure (a rank's exit code
  // or 128 + its signal; 128 + a forwarded signal; 1 if the daemon died).
  int Run();

 private:
  void OnSignal(int signal);
  void OnTrainerExit(const Trainer& trainer);
  void OnDaemonExit(int status);
  // Sends `signal` to the running ranks and gives them `grace` to exit.
  void StopTrainers(int signal);
  void Fail(int exit_code);

  TrainerGroup& trainers_;
  PrivateDaemon* daemon_;
  const SignalWatcher& signals_;
  Options options_;
  std::optional<int> exit_code_;  // set by the first failure
  bool stopping_ = false;
  bool signalled_ = false;  // a signal was forwarded; the next one kills
  std::optional<absl::Time> kill_deadline_;
};

}  // namespace collective::launcher
