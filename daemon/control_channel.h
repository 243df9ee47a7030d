// Point-to-point control messages between the daemons of a job, on the MPI
// world's control communicator: negotiation, heartbeats, job events. Sends
// never block (MPI_Isend, completed on later calls); arrivals are found with
// MPI_Iprobe, so the engine never waits on another node here.
//
// Every message carries the job's generation (how many jobs the world has
// formed), so that a message a node sent for an earlier job — a heartbeat
// still in flight when that job ended — is dropped rather than read as this
// job's. Engine thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/message.h>
#include <mpi.h>

#include "absl/status/status.h"
#include "daemon/world.h"

namespace collective::daemon {

enum class ControlTag : int {
  kReady = 1,      // NodeReady, node -> node 0
  kDecisions = 2,  // Decisions, node 0 -> nodes
  kHeartbeat = 3,  // Heartbeat
  kJobEvent = 4,   // JobEvent, any node -> every other node
};

class ControlChannel {
 public:
  using Clock = std::chrono::steady_clock;

  struct Received {
    int from = 0;
    std::string bytes;  // the message, without the envelope
  };

  ControlChannel(const World& world, uint64_t generation);
  // Sends still in flight are left to MPI: their buffers are leaked rather
  // than freed under it (a job that ends normally has none).
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  int node() const { return world_.rank(); }
  int nodes() const { return world_.size(); }

  absl::Status Send(int to, ControlTag tag, const google::protobuf::Message& message);
  // Messages of this generation with `tag` that have arrived, appended to
  // `out` in arrival order.
  absl::Status Receive(ControlTag tag, std::vector<Received>& out);
  // Completes the sends MPI has finished with.
  absl::Status Progress();

  // When a message of this generation last came from `node`, or when the
  // channel was made if none has.
  Clock::time_point last_heard(int node) const { return last_heard_[node]; }

 private:
  struct InFlight {
    std::unique_ptr<std::string> bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  const World& world_;
  const uint64_t generation_;
  std::vector<Clock::time_point> last_heard_;
  std::deque<InFlight> sends_;
};

}  // namespace collective::daemon
