// Job formation across nodes: once a daemon's local ranks have all
// registered, the daemons allgather their local sizes and job ids (without
// blocking the engine, which keeps serving while slower nodes form). The
// result is the job's NodeLayout, or an error every node reports alike when
// the nodes disagree on the job.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "absl/status/statusor.h"
#include "daemon/node_layout.h"
#include "daemon/world.h"

namespace collective::daemon {

class NodeExchange {
 public:
  // What this node contributes. Job ids longer than kJobIdBytes are compared
  // by their first kJobIdBytes bytes.
  static constexpr size_t kJobIdBytes = 256;
  struct Contribution {
    int32_t local_size = 0;
    std::string job_id;
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
  std::optional<absl::StatusOr<NodeLayout>> Poll();

  // Whether MPI still needs the buffers (an exchange abandoned before it
  // completed cannot be cancelled: MPI collectives have no cancel).
  bool in_flight() const { return request_ != MPI_REQUEST_NULL; }

 private:
  struct Wire {
    int32_t local_size = 0;
    uint32_t job_id_bytes = 0;
    std::array<char, kJobIdBytes> job_id = {};
  };

  NodeExchange() = default;
  absl::StatusOr<NodeLayout> Layout() const;

  int node_ = 0;
  Wire mine_;
  std::vector<Wire> all_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace collective::daemon
