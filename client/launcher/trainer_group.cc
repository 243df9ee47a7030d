#include "client/launcher/trainer_group.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace collective::launcher {

absl::StatusOr<TrainerGroup> TrainerGroup::Start(const std::vector<std::string>& command,
                                                 const JobIdentity& job,
                                                 const Environment& environment,
                                                 const OutputOptions& output) {
  TrainerGroup group;
  for (int rank = 0; rank < job.size; ++rank) {
    // Returning destroys the ranks already started, which kills them.
    if (absl::Status started =
            group.Add(rank, command, RankEnvironment(environment, job, rank), output);
        !started.ok()) {
      return started;
    }
  }
  return group;
}

absl::StatusOr<TrainerGroup> TrainerGroup::StartOnNodes(const std::vector<std::string>& command,
                                                        const std::string& job_id,
                                                        const std::vector<std::string>& hosts,
                                                        const std::vector<std::string>& sockets,
                                                        const std::vector<int>& local_sizes,
                                                        const Environment& environment,
                                                        const OutputOptions& output) {
  TrainerGroup group;
  const int size = std::accumulate(local_sizes.begin(), local_sizes.end(), 0);
  for (int rank = 0; rank < size; ++rank) {
    const RankPlacement placement = PlaceRank(local_sizes, rank);
    // Returning destroys the ranks already started, which kills them.
    if (absl::Status started = group.Add(
            rank, command,
            RankEnvironment(environment, sockets[static_cast<size_t>(placement.cross_rank)], job_id,
                            hosts[static_cast<size_t>(placement.cross_rank)], placement),
            output);
        !started.ok()) {
      return started;
    }
  }
  return group;
}

absl::Status TrainerGroup::Add(int rank, const std::vector<std::string>& command,
                               const Environment& environment, const OutputOptions& output,
                               bool input_pipe) {
  UniqueFd out_copy, err_copy;
  if (!output.directory.empty()) {
    const std::string directory =
        absl::StrCat(output.directory, "/rank.", absl::StrFormat("%0*d", output.rank_digits, rank));
    std::error_code error;
    std::filesystem::create_directories(directory, error);
    if (error) {
      return absl::PermissionDeniedError(absl::StrCat("cannot make ", directory, " for rank ", rank,
                                                      "'s output: ", error.message()));
    }
    for (auto [copy, name] : {std::pair{&out_copy, "stdout"}, std::pair{&err_copy, "stderr"}}) {
      const std::string path = absl::StrCat(directory, "/", name);
      copy->Reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!copy->valid()) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
      }
    }
  }
  const bool piped = output.prefix || output.timestamp || out_copy.valid();
  auto process = ChildProcess::Spawn(
      {.argv = command,
       .environment = ToEnvp(environment),
       .output = piped ? SpawnOptions::Output::kSeparatePipes : SpawnOptions::Output::kInherit,
       .input_pipe = input_pipe});
  if (!process.ok()) return process.status();
  Trainer& trainer = trainers_.emplace_back(Trainer{rank, std::move(*process), {}, {}});
  if (piped) {
    const std::string prefix = output.prefix ? absl::StrCat("[", rank, "] ") : "";
    trainer.out.emplace(trainer.process.TakeStdout(), prefix, STDOUT_FILENO, std::move(out_copy),
                        output.timestamp);
    trainer.err.emplace(trainer.process.TakeStderr(), prefix, STDERR_FILENO, std::move(err_copy),
                        output.timestamp);
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
