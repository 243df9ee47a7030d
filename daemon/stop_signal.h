// What ends the daemon: SIGTERM, SIGINT or SIGUSR2 (which mpirun forwards),
// SIGUSR1 (a launcher's word that a node of the MPI world is lost, so that
// nobody waits for it), or the engine's own request when the daemon cannot
// go on (its MPI world of daemons broke). main waits on it; the engine requests through it.
// Signals are taken synchronously (signalfd), so shutdown runs as ordinary
// code on main's thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

namespace collective::daemon {

class StopSignal {
 public:
  // Blocks SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 in the calling thread, and so in
  // every thread it starts later: call it before any other thread exists.
  static absl::StatusOr<std::unique_ptr<StopSignal>> Create();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  struct Reason {
    std::string text;   // "received SIGTERM", or the engine's words
    int exit_code = 0;  // 0 for a signal
    // SIGUSR1: a node of the world is gone; the daemon stops without
    // waiting to hear from the others (see engine::ShutdownEvent).
    bool world_lost = false;
  };

  // Thread-safe; the first request wins.
  void Request(std::string text, int exit_code);
  // Blocks until a signal arrives or Request is called.
  Reason Wait();

 private:
  StopSignal(int signal_fd, int event_fd) : signal_fd_(signal_fd), event_fd_(event_fd) {}

  const int signal_fd_;
  const int event_fd_;
  std::mutex mutex_;
  bool requested_ = false;
  Reason requested_reason_;
};

}  // namespace collective::daemon
