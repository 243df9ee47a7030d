// Child processes for tests: spawn with arguments and environment, capture
// stdout and stderr in files, wait with a deadline (pidfd + poll, no sleeps),
// signal, and reap.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace collective::testing {

class Subprocess {
 public:
  // Starts `argv[0]` (a path) with `argv`, the current environment plus
  // `environment` (which overrides).
  static absl::StatusOr<Subprocess> Start(
      const std::vector<std::string>& argv,
      const std::map<std::string, std::string>& environment = {});

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // Kills (SIGKILL) and reaps a child that is still running.
  ~Subprocess();

  pid_t pid() const { return pid_; }

  // The exit status as from waitpid, or nullopt if still running at the
  // deadline.
  std::optional<int> Wait(absl::Duration timeout);
  void Signal(int signal) const;

  std::string Stdout() const;
  std::string Stderr() const;
  // "exit 0" / "signal 9", plus stderr, for assertion messages.
  std::string Describe(int status) const;

 private:
  Subprocess() = default;
  void Close();

  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::optional<int> status_;
  std::string stdout_path_;
  std::string stderr_path_;
};

// Exit code 0.
bool ExitedCleanly(std::optional<int> status);

// The directory of the running executable (tests find the binaries they
// start next to themselves, in build/tests or build/bin).
std::string ExecutableDirectory();

}  // namespace collective::testing
