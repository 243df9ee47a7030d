#include "client/launcher/trainer_group.h"

#include <utility>

#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace collective::launcher {

absl::StatusOr<TrainerGroup> TrainerGroup::Start(const std::vector<std::string>& command,
                                                 const JobIdentity& job,
                                                 const Environment& environment,
                                                 bool prefix_output) {
  TrainerGroup group;
  for (int rank = 0; rank < job.size; ++rank) {
    // Returning destroys the ranks already started, which kills them.
    if (absl::Status started =
            group.Add(rank, command, RankEnvironment(environment, job, rank), prefix_output);
        !started.ok()) {
      return started;
    }
  }
  return group;
}

absl::Status TrainerGroup::Add(int rank, const std::vector<std::string>& command,
                               const Environment& environment, bool prefix_output) {
  auto process = ChildProcess::Spawn({.argv = command,
                                      .environment = ToEnvp(environment),
                                      .output = prefix_output ? SpawnOptions::Output::kSeparatePipes
                                                              : SpawnOptions::Output::kInherit});
  if (!process.ok()) return process.status();
  Trainer& trainer = trainers_.emplace_back(Trainer{rank, std::move(*process), {}, {}});
  if (prefix_output) {
    const std::string prefix = absl::StrCat("[", rank, "] ");
    trainer.out.emplace(trainer.process.TakeStdout(), prefix, STDOUT_FILENO);
    trainer.err.emplace(trainer.process.TakeStderr(), prefix, STDERR_FILENO);
  }
  return absl::OkStatus();
}

int TrainerGroup::running() const {
  int running = 0;
  for (const Trainer& trainer : trainers_) running += trainer.process.reaped() ? 0 : 1;
  return running;
}

void TrainerGroup::Watch(PollSet& set, const std::function<void(Trainer&)>& on_exit) {
  for (Trainer& trainer : trainers_) {
    for (std::optional<PrefixedStream>* stream : {&trainer.out, &trainer.err}) {
      if (stream->has_value() && (*stream)->open()) {
        set.Add((*stream)->fd(), [stream] { (*stream)->Pump(); });
      }
    }
    if (!trainer.process.reaped()) {
      set.Add(trainer.process.pidfd(), [&trainer, on_exit] {
        if (trainer.process.TryReap().has_value()) on_exit(trainer);
      });
    }
  }
}

void TrainerGroup::SignalRunning(int signal) const {
  for (const Trainer& trainer : trainers_) trainer.process.Signal(signal);
}

void TrainerGroup::DrainOutput() {
  for (Trainer& trainer : trainers_) {
    if (trainer.out.has_value()) trainer.out->Drain();
    if (trainer.err.has_value()) trainer.err->Drain();
  }
}

}  // namespace collective::launcher
