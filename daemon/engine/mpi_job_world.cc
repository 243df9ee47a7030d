#include "daemon/engine/mpi_job_world.h"

#include "daemon/world/control_channel.h"
#include "daemon/world/nccl_world.h"
#include "daemon/world/set_communicators.h"

namespace collective::daemon::engine {

absl::StatusOr<std::unique_ptr<exec::SetGroups>> MpiJobWorld::MakeSetGroups(
    const job::NodeLayout& layout) {
  // MPI_Comm_dup of the world's data communicator waits for every node.
  auto comms = world::SetCommunicators::Create(link_.world(), layout);
  if (!comms.ok()) return comms.status();
  return std::unique_ptr<exec::SetGroups>(std::move(*comms));
}

std::unique_ptr<negotiation::ControlLink> MpiJobWorld::MakeControlLink() {
  return std::make_unique<world::ControlChannel>(link_.world(), generation_);
}

absl::StatusOr<gpu::GlobalLayout> MpiJobWorld::ShareNcclLayout(int local_devices,
                                                               const gpu::NewUniqueId& new_id) {
  return world::ShareLayoutOverMpi(link_.world().data(), local_devices, new_id);
}

}  // namespace collective::daemon::engine
