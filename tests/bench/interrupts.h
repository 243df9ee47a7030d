// SIGINT, SIGTERM and SIGHUP, taken synchronously by the launcher: it blocks
// them and watches a signalfd while it waits for its children, so that an
// interrupted run still stops its workers, mpirun and the daemon instead of
// leaving them behind. Children start with the signals unblocked.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <signal.h>

#include "absl/status/statusor.h"
#include "tests/common/subprocess.h"

namespace collective::bench {

class Interrupts {
 public:
  // Blocks the signals in this thread and in the threads it starts later.
  Interrupts();
  // Restores the previous mask; a signal still pending is then delivered.
  ~Interrupts();
  Interrupts(const Interrupts&) = delete;
  Interrupts& operator=(const Interrupts&) = delete;

  // Readable once one of the signals is pending.
  int fd() const { return fd_; }
  // The pending signal, consumed, if there is one.
  std::optional<int> Take();

  // Subprocess::Start with the signals unblocked, as a child inherits the
  // mask of the thread that starts it. Refuses to start anything once one of
  // them is pending: unblocking would deliver it here, before the children
  // already running are stopped.
  absl::StatusOr<testing::Subprocess> Start(
      const std::vector<std::string>& argv,
      const std::map<std::string, std::string>& environment = {});

 private:
  sigset_t signals_;
  sigset_t previous_;
  int fd_ = -1;
};

// "interrupted by SIGTERM"
absl::Status Interrupted(int signal);

}  // namespace collective::bench
