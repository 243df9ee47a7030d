#include "daemon/world/node_exchange.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace collective::daemon::world {
namespace {

absl::string_view JobId(const auto& wire) {
  return absl::string_view(wire.job_id.data(), wire.job_id_bytes);
}

std::string Host(const auto& wire) {
  return std::string(wire.host.data(), strnlen(wire.host.data(), wire.host.size()));
}

std::string DescribeSettings(const NodeExchange::Settings& settings) {
  return absl::StrCat("fusion_threshold_bytes ", settings.fusion_threshold_bytes,
                      ", cross_node_chunk_bytes ", settings.cross_node_chunk_bytes,
                      ", response_cache_capacity ", settings.response_cache_capacity, ", autotune ",
                      settings.autotune != 0 ? "true" : "false");
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeExchange>> NodeExchange::Start(const World& world,
                                                                  const Contribution& mine) {
  std::unique_ptr<NodeExchange> exchange(new NodeExchange());
  exchange->node_ = world.rank();
  Wire& wire = exchange->mine_;
  wire.local_size = mine.local_size;
  wire.job_id_bytes = static_cast<uint32_t>(std::min(mine.job_id.size(), kJobIdBytes));
  std::memcpy(wire.job_id.data(), mine.job_id.data(), wire.job_id_bytes);
  std::memcpy(wire.host.data(), world.node_name().data(),
              std::min(world.node_name().size(), kHostBytes - 1));
  wire.settings = mine.settings;
  exchange->all_.resize(static_cast<size_t>(world.size()));
  const absl::Status started =
      MpiStatus(MPI_Iallgather(&exchange->mine_, sizeof(Wire), MPI_BYTE, exchange->all_.data(),
                               sizeof(Wire), MPI_BYTE, world.control(), &exchange->request_),
                "MPI_Iallgather of the nodes' local sizes");
  if (!started.ok()) return started;
  return exchange;
}

NodeExchange::~NodeExchange() {
  // Completing it here could block forever on a node that never forms; the
  // owner keeps an exchange that is in flight alive instead (see in_flight).
}

std::optional<absl::StatusOr<job::NodeLayout>> NodeExchange::Poll() {
  if (request_ == MPI_REQUEST_NULL) return Layout();
  int done = 0;
  if (absl::Status tested = MpiStatus(MPI_Test(&request_, &done, MPI_STATUS_IGNORE),
                                      "MPI_Test of the nodes' local sizes");
      !tested.ok()) {
    request_ = MPI_REQUEST_NULL;
    return absl::StatusOr<job::NodeLayout>(tested);
  }
  if (!done) return std::nullopt;
  return Layout();
}

absl::StatusOr<job::NodeLayout> NodeExchange::Layout() const {
  job::NodeLayout layout;
  layout.node = node_;
  layout.local_sizes.clear();
  // Every node checks against node 0, so that all report the same error.
  const Wire& first = all_.front();
  for (size_t node = 0; node < all_.size(); ++node) {
    const Wire& wire = all_[node];
    if (JobId(wire) != JobId(first)) {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", node, " (", Host(wire), ") formed job '", JobId(wire),
                       "' while node 0 (", Host(first), ") formed job '", JobId(first),
                       "'; every node's trainers must register the same job id"));
    }
    if (!(wire.settings == first.settings)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", node, " (", Host(wire), ") runs with ", DescribeSettings(wire.settings),
          " but node 0 (", Host(first), ") with ", DescribeSettings(first.settings),
          "; the daemons of a job must agree on them"));
    }
    layout.local_sizes.push_back(wire.local_size);
    layout.hosts.push_back(Host(wire));
  }
  return layout;
}

}  // namespace collective::daemon::world
