// Point-to-point control messages between the daemons of a job, on the MPI
// world's control communicator: the MPI side of negotiation::ControlLink
// (negotiation, heartbeats, job events). Sends
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
#include "daemon/negotiation/control_link.h"
#include "daemon/world/world.h"

namespace collective::daemon::world {

class ControlChannel : public negotiation::ControlLink {
 public:
  ControlChannel(const World& world, uint64_t generation);
  // Sends still in flight are left to MPI: their buffers are leaked rather
  // than freed under it (a job that ends normally has none).
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  int node() const override { return world_.rank(); }
  int nodes() const override { return world_.size(); }

  absl::Status Send(int to, negotiation::ControlTag tag,
                    const google::protobuf::Message& message) override;
  // Messages of this generation with `tag` that have arrived, appended to
  // `out` in arrival order.
  absl::Status Receive(negotiation::ControlTag tag, std::vector<Received>& out) override;
  // Completes the sends MPI has finished with.
  absl::Status Progress() override;

  // When a message of this generation last came from `node`, or when the
  // channel was made if none has.
  Clock::time_point last_heard(int node) const override { return last_heard_[node]; }

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

}  // namespace collective::daemon::world
