#include "daemon/world/nccl_world.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "daemon/world/world.h"

namespace collective::daemon::world {
namespace {

// ncclUniqueId's size; the id travels as plain bytes.
constexpr int kUniqueIdBytes = 128;

}  // namespace

absl::StatusOr<gpu::GlobalLayout> ShareLayoutOverMpi(MPI_Comm comm, int local_devices,
                                                     const gpu::NewUniqueId& new_id) {
  int nodes = 0;
  int node = 0;
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_size(comm, &nodes), "MPI_Comm_size"));
  RETURN_IF_ERROR(MpiStatus(MPI_Comm_rank(comm, &node), "MPI_Comm_rank"));
  std::vector<int> devices(static_cast<size_t>(nodes), 0);
  RETURN_IF_ERROR(
      MpiStatus(MPI_Allgather(&local_devices, 1, MPI_INT, devices.data(), 1, MPI_INT, comm),
                "MPI_Allgather of the nodes' CUDA device counts"));
  gpu::GlobalLayout layout;
  std::vector<int> without;
  for (int n = 0; n < nodes; ++n) {
    if (n < node) layout.first_rank += devices[n];
    layout.ranks += devices[n];
    if (devices[n] == 0) without.push_back(n);
  }
  // Every node sees the same counts, so every node gives up alike.
  if (!without.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node", without.size() > 1 ? "s " : " ", absl::StrJoin(without, ", "),
                     " of the job registered no CUDA device, so no NCCL communicator can span "
                     "the nodes"));
  }
  // Node 0's id, after a byte that says whether it has one.
  absl::StatusOr<std::string> made = std::string();
  if (node == 0) made = new_id();
  std::string message(1 + kUniqueIdBytes, '\0');
  if (node == 0 && made.ok()) {
    message[0] = 1;
    made->copy(message.data() + 1, std::min<size_t>(made->size(), kUniqueIdBytes));
  }
  RETURN_IF_ERROR(MpiStatus(MPI_Bcast(message.data(), 1 + kUniqueIdBytes, MPI_BYTE, 0, comm),
                            "MPI_Bcast of the NCCL unique id"));
  if (node == 0 && !made.ok()) return made.status();
  if (message[0] != 1) {
    return absl::UnavailableError(
        "node 0 could not make the NCCL unique id of the communicator across the nodes (its log "
        "says why)");
  }
  layout.unique_id = message.substr(1);
  return layout;
}

}  // namespace collective::daemon::world
