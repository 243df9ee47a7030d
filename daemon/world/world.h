// The daemons of a job as an MPI world: one daemon per node, launched by the
// site's MPI launcher (mpirun, srun, the Kubernetes MPI Operator). A daemon
// started without a launcher is a world of one node and never touches MPI.
//
// MPI is initialised on the engine thread, which is then the only thread
// that calls it (MPI_THREAD_FUNNELED). Errors return (MPI_ERRORS_RETURN on
// every communicator) so that a failed transfer becomes a job failure with a
// message, not an abort of the daemon.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace collective::daemon::world {

enum class WorldMode {
  kAuto,    // MPI when started by an MPI launcher, else a world of one
  kSingle,  // a world of one, whatever the environment says
};

// Whether the environment shows an MPI launcher started this process.
bool LaunchedByMpiLauncher();

// The status of an MPI call: OK for MPI_SUCCESS, else UNAVAILABLE naming
// `what` and MPI's own description of the error.
absl::Status MpiStatus(int error, absl::string_view what);

class World {
 public:
  // Initialises MPI (on the calling thread) when `mode` asks for it and a
  // launcher started this process; otherwise a world of one.
  static absl::StatusOr<std::unique_ptr<World>> Create(WorldMode mode);
  // A world of one, for tests and for daemons started on their own.
  static std::unique_ptr<World> Single();
  ~World();  // finalises MPI if it was initialised here
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // This daemon's index among the job's nodes, and their number.
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool single() const { return size_ == 1; }
  // This node's name, for messages ("node 1 (host-b)").
  const std::string& node_name() const { return node_name_; }

  // Communicators of their own for the control messages (negotiation) and
  // for the data transfers, so that the two never match each other's
  // messages. MPI_COMM_NULL in a world of one.
  MPI_Comm control() const { return control_; }
  MPI_Comm data() const { return data_; }

  // Tells every other daemon that this one is stopping (whether or not a
  // job runs), and waits, boundedly, until the notices are out and every
  // other daemon has said that it stops too: MPI_Finalize then finds them
  // all. Past the bound (a daemon died, or left MPI unfinalised), MPI is
  // abandoned (the destructor skips MPI_Finalize, which would wait for it).
  void AnnounceStop();
  // A node whose daemon announced that it stops, if one did since the last
  // call; -1 otherwise.
  int TakeStopNotice();
  // The tag of stop notices on the control communicator (the negotiation's
  // messages use small tags of their own, see negotiation/control_link.h).
  static constexpr int kStopNoticeTag = 50;

  // MPI cannot be trusted any more (a node died, transfers were left
  // unfinished): the destructor then skips MPI_Finalize, which would wait
  // for the dead.
  void Abandon() { abandoned_ = true; }
  bool abandoned() const { return abandoned_; }

 private:
  World() = default;

  bool initialised_ = false;
  bool abandoned_ = false;
  // Per node: it said that it stops (this one: itself).
  std::vector<bool> stopping_;
  int rank_ = 0;
  int size_ = 1;
  std::string node_name_;
  MPI_Comm control_ = MPI_COMM_NULL;
  MPI_Comm data_ = MPI_COMM_NULL;
};

}  // namespace collective::daemon::world
