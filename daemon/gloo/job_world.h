// A job's world among resident daemons: the Gloo contexts that the daemons
// of the nodes where a job has ranks form through the rendezvous store its
// launch environment names, and what they told each other while forming
// (host names, local sizes, settings), as world/node_exchange.h gives the
// MPI world. One world per job and generation; the daemons keep running
// and form other jobs' worlds beside it.
//
// Formation blocks until every node has arrived and connected, or the
// deadline passes: call Form on a thread of its own, never on the engine
// thread. The JobWorld it returns is then handed to the engine; its data
// context is shared with the set groups (set_groups.h) and the transport,
// and lives as long as the last of them; its control context goes to the
// control link (gloo_control_link.h), which owns it alone. Any thread may read a JobWorld; only one
// thread at a time may create contexts from it (its store and device are not to be raced on).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/device.h>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "daemon/job/node_layout.h"

namespace collective::daemon::gloo {

struct JobWorldOptions {
  // The job as its launch environment names it, and how many times it has
  // formed before (a restarted job's count, the same on every node): the
  // store's keys are scoped by both, so that a re-formed job never meets
  // its previous world's keys.
  std::string job_id;
  uint64_t generation = 0;
  // This daemon's place among the job's nodes, and how many there are.
  int node = 0;
  int nodes = 1;
  // This node's name in error messages ("node 2 (host b)"); empty: the
  // machine's host name.
  std::string host;
  // Where this daemon accepts the other daemons' connections: an address or
  // host name to bind, or else a network interface; both empty: the
  // address the machine's host name resolves to.
  std::string bind_address;
  std::string iface;
  // What this node contributes to the job's layout: its ranks, and the
  // settings every node must share, as text (compared byte for byte and
  // quoted in the error when two nodes differ).
  int32_t local_size = 1;
  std::string settings;
  // When formation gives up (every node must have arrived and connected).
  Clock::time_point deadline;
  // How long one operation on the job's data context may wait for a peer
  // before Gloo fails it (gloo::Context::setTimeout).
  std::chrono::milliseconds operation_timeout = std::chrono::seconds(30);
};

class JobWorld {
 public:
  // Forms the job's world on `store`, which must outlive the JobWorld and
  // every set group made from it. Blocks (see above). Fails with
  // DEADLINE_EXCEEDED naming the nodes that did not arrive in time,
  // FAILED_PRECONDITION when the nodes disagree on their settings or a
  // node's place was taken already, UNAVAILABLE when connecting fails.
  static absl::StatusOr<std::unique_ptr<JobWorld>> Form(::gloo::rendezvous::Store& store,
                                                        const JobWorldOptions& options);

  ~JobWorld();
  JobWorld(const JobWorld&) = delete;
  JobWorld& operator=(const JobWorld&) = delete;

  int node() const { return layout_.node; }
  int nodes() const { return layout_.nodes(); }
  const std::string& job_id() const { return job_id_; }
  uint64_t generation() const { return generation_; }
  // By node: the host names the nodes gave (layout().hosts).
  const std::vector<std::string>& hosts() const { return layout_.hosts; }
  // The job's layout: local sizes and hosts by node, this node.
  const job::NodeLayout& layout() const { return layout_; }
  // "node 2 (host b)", for error messages.
  std::string NodeName(int of_node) const;

  // The context of the job's data (collectives and point-to-point
  // transfers of the global set), rank = node.
  const std::shared_ptr<::gloo::Context>& context() const { return data_; }
  // The context of control messages only (GlooControlLink), so that they
  // never queue behind data transfers; rank = node.
  // Null once taken.
  const std::shared_ptr<::gloo::Context>& control() const { return control_; }
  // Gives the control context to its one user, so that the connections
  // close when that user is done with them.
  std::shared_ptr<::gloo::Context> TakeControl() { return std::move(control_); }
  // The device every context of the job connects through (one event loop).
  const std::shared_ptr<::gloo::transport::Device>& device() const { return device_; }
  // The launcher's store, scoped to this job and generation: set groups
  // rendezvous under it.
  ::gloo::rendezvous::Store& store() { return *scoped_; }
  std::chrono::milliseconds operation_timeout() const { return operation_timeout_; }

 private:
  JobWorld() = default;

  std::string job_id_;
  uint64_t generation_ = 0;
  job::NodeLayout layout_;
  std::chrono::milliseconds operation_timeout_{0};
  std::unique_ptr<::gloo::rendezvous::PrefixStore> scoped_;
  std::shared_ptr<::gloo::transport::Device> device_;
  std::shared_ptr<::gloo::Context> data_;
  std::shared_ptr<::gloo::Context> control_;
};

// Connects `nodes` daemons of a job (this one at `node`) as a full mesh
// through `store`, scoped by `prefix`, on `device`, before `deadline`; the
// context then waits `operation_timeout` per operation. `names` by node,
// for errors. Blocks; the set groups and the job world share it.
absl::StatusOr<std::shared_ptr<::gloo::Context>> ConnectMesh(
    ::gloo::rendezvous::Store& store, const std::string& prefix,
    std::shared_ptr<::gloo::transport::Device> device, int node, int nodes,
    const std::vector<std::string>& names, Clock::time_point deadline,
    std::chrono::milliseconds operation_timeout);

}  // namespace collective::daemon::gloo
