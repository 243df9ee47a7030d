// Job formation across nodes: once a daemon's local ranks have all
// registered, the daemons allgather their local sizes, job ids, host names
// and the settings that must agree (without blocking the engine, which
// keeps serving while slower nodes form). The result is the job's
// NodeLayout, or an error every node reports alike when the nodes disagree.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "absl/status/statusor.h"
#include "daemon/job/node_layout.h"
#include "daemon/world/world.h"

namespace collective::daemon::world {

class NodeExchange {
 public:
  // Job ids and host names longer than these are compared (and shown) by
  // their first bytes.
  static constexpr size_t kJobIdBytes = 256;
  static constexpr size_t kHostBytes = 64;

  // Settings every node must share: each plans the same fused batches and
  // transfers from node 0's decisions, and caches the same tensors.
  struct Settings {
    uint64_t fusion_threshold_bytes = 0;
    uint64_t cross_node_chunk_bytes = 0;
    uint32_t response_cache_capacity = 0;
    // Node 0 tunes for every node; one that tunes alone would wait for
    // values that never come, and one that does not would take them.
    uint8_t autotune = 0;
    friend bool operator==(const Settings&, const Settings&) = default;
  };

  // What this node contributes.
  struct Contribution {
    int32_t local_size = 0;
    std::string job_id;
    Settings settings;
  };

  // Starts the exchange on the world's control communicator. Every daemon of
  // the world must start the same number of exchanges, in the same order.
  static absl::StatusOr<std::unique_ptr<NodeExchange>> Start(const World& world,
                                                             const Contribution& mine);
  ~NodeExchange();
  NodeExchange(const NodeExchange&) = delete;
  NodeExchange& operator=(const NodeExchange&) = delete;

  // Nullopt while the other nodes have not all contributed; then the layout,
  // or why the job cannot form.
  std::optional<absl::StatusOr<job::NodeLayout>> Poll();

  // Whether MPI still needs the buffers (an exchange abandoned before it
  // completed cannot be cancelled: MPI collectives have no cancel).
  bool in_flight() const { return request_ != MPI_REQUEST_NULL; }

 private:
  struct Wire {
    int32_t local_size = 0;
    uint32_t job_id_bytes = 0;
    std::array<char, kJobIdBytes> job_id = {};
    std::array<char, kHostBytes> host = {};
    Settings settings;
  };

  NodeExchange() = default;
  absl::StatusOr<job::NodeLayout> Layout() const;

  int node_ = 0;
  Wire mine_;
  std::vector<Wire> all_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace collective::daemon::world
