// The engine's link to the other daemons: the MPI world that `mpirun` or
// `srun` started them in (or a world of one), forming a job across its nodes
// without blocking the engine thread, the stop notices of the other
// daemons, and the breaking of the world (a node died or stopped, MPI
// failed, transfers were left unfinished): a broken world forms no other
// job, and the daemon stops once its jobs are gone. Engine thread only,
// like all of MPI.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/daemon_config.h"
#include "daemon/exec/executor.h"
#include "daemon/job/job.h"
#include "daemon/job/node_layout.h"
#include "daemon/world/mpi_transport.h"
#include "daemon/world/node_exchange.h"
#include "daemon/world/world.h"

namespace collective::daemon::engine {

class WorldLink {
 public:
  // Asks the daemon to stop (with why, and the process's exit code).
  using StopRequest = std::function<void(std::string reason, int exit_code)>;
  // What the engine does when the world breaks.
  class Listener {
   public:
    virtual ~Listener() = default;
    // MPI is abandoned: nothing decided across nodes can finish.
    virtual void WorldAbandoned(const absl::Status& why) = 0;
    // Whether any job is still served (the daemon stops when none is).
    virtual bool ServesJobs() const = 0;
  };

  WorldLink(const config::DaemonConfig& config, StopRequest stop, Listener& listener);
  // MPI ends on the thread that began it (see Finish).
  ~WorldLink() = default;

  // Joins the launcher's MPI world, or makes a world of one.
  absl::Status Start();
  // At the engine's end: the other daemons hear that this one stops, then
  // MPI_Finalize meets them — unless MPI cannot be trusted any more, when
  // the process's exit is the clean-up.
  void Finish();

  world::World& world() { return *world_; }
  const world::World& world() const { return *world_; }
  world::MpiTransport& transport() { return transport_; }
  bool single() const { return world_->single(); }
  // The engine looks for the others' messages even without a job: a node
  // that stops says so, and this one stops too.
  bool waits() const { return !world_->single() && !world_->abandoned(); }
  // Why no job can form any more; OK while the world holds.
  const absl::Status& broken() const { return broken_; }

  // Starts forming `job` with the other nodes; an error breaks the world.
  absl::Status StartExchange(const job::Job& job);
  bool exchanging() const { return exchange_ != nullptr; }
  // The exchange's outcome, once it has one (the exchange then ends).
  std::optional<absl::StatusOr<job::NodeLayout>> PollExchange();
  // An exchange that cannot complete any more: kept for MPI, and the world
  // cannot form later jobs.
  void AbandonExchange(const absl::Status& why);
  // Jobs formed across nodes so far: each job's own generation.
  uint64_t generation() const { return generation_; }

  // Looks for another daemon's stop notice (at most every millisecond) and
  // breaks the world on one.
  void LookForStopNotices(Clock::time_point now);
  // The world cannot form another job. `abandon_mpi`: MPI cannot be trusted
  // any more (its clean-up, which could hang on a dead node, is skipped).
  void Break(const absl::Status& why, bool abandon_mpi);
  // The daemon stops: the world forms no other job, and breaks without
  // asking the daemon to stop again.
  void Stopping() { stopping_ = true; }
  bool stopping() const { return stopping_; }
  // Asks the daemon to stop because the world broke (once).
  void RequestStop();

 private:
  const config::DaemonConfig& config_;
  const StopRequest stop_;
  Listener& listener_;
  std::unique_ptr<world::World> world_;
  world::MpiTransport transport_;  // transfers of collectives across nodes
  uint64_t generation_ = 0;
  std::unique_ptr<world::NodeExchange> exchange_;                // formation across nodes
  std::vector<std::unique_ptr<world::NodeExchange>> abandoned_;  // MPI may still write them
  absl::Status broken_;
  bool stopping_ = false;
  bool stop_requested_ = false;
  int exit_code_ = 0;  // 3 when MPI had to be abandoned
  // When to look for another daemon's stop notice next.
  Clock::time_point next_stop_look_{};
};

}  // namespace collective::daemon::engine
