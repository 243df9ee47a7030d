// Point-to-point control messages between the daemons of a job, on the MPI
// world's control communicator: the MPI side of negotiation::ControlLink
// (negotiation, heartbeats, job events). Sends
// never block (MPI_Isend, completed on later calls); arrivals are found with
// MPI_Iprobe, so the engine never waits on another node here.
//
// Arrivals are collected for every tag at once, once per round of Receives:
// one MPI_Iprobe for any tag finds that nothing came, where a probe per tag
// cost as many calls into MPI, and Open MPI's TCP transport polls its
// sockets (a system call) on nearly every call. The engine looks several
// times per small allreduce across nodes, on cores its trainers share.
//
// Every message carries the job's generation (how many jobs the world has
// formed), so that a message a node sent for an earlier job — a heartbeat
// still in flight when that job ended — is dropped rather than read as this
// job's. Engine thread only.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/message.h>
#include <mpi.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
  // `out` in arrival order (see ControlLink::Receive).
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

  using Inbox = std::vector<Received>;

  // Takes every control message that has arrived into the inboxes. False
  // when something else of the control communicator is first in line (a
  // stop notice, MPI's own traffic of MPI_Comm_create_group): it is left for
  // its reader, and each Receive then probes for its own tag.
  absl::StatusOr<bool> Collect();
  // Takes every message with `tag` that has arrived into `inbox`.
  absl::Status ProbeTag(int tag, Inbox& inbox);
  // Receives the message `probed` found into `inbox`, unless it belongs to
  // another generation.
  absl::Status Take(const MPI_Status& probed, Inbox& inbox);

  const World& world_;
  const uint64_t generation_;
  std::vector<Clock::time_point> last_heard_;
  std::deque<InFlight> sends_;
  // Per tag: what arrived and has not been received, and whether arrivals
  // were collected since the tag's last Receive.
  std::array<Inbox, negotiation::kControlTagEnd> inboxes_;
  std::array<bool, negotiation::kControlTagEnd> collected_{};
};

}  // namespace collective::daemon::world
