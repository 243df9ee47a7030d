// A job's view of the MPI world of daemons (world_link.h): the job spans
// every node of the world, its sets get MPI communicators, its negotiation
// runs on the world's control communicator under the job's generation, and
// breaking it breaks the world for every later job (the daemons must be
// restarted together). Engine thread only, like all of MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "daemon/engine/job_world.h"
#include "daemon/engine/world_link.h"

namespace collective::daemon::engine {

class MpiJobWorld : public JobWorld {
 public:
  // The job formed by the world's latest exchange (its generation).
  explicit MpiJobWorld(WorldLink& link) : link_(link), generation_(link.generation()) {}

  int node() const override { return link_.world().rank(); }
  const std::string& node_name() const override { return link_.world().node_name(); }
  exec::NodeTransport& transport() override { return link_.transport(); }
  absl::StatusOr<std::unique_ptr<exec::SetGroups>> MakeSetGroups(
      const job::NodeLayout& layout) override;
  std::unique_ptr<negotiation::ControlLink> MakeControlLink() override;
  absl::StatusOr<gpu::GlobalLayout> ShareNcclLayout(int local_devices,
                                                    const gpu::NewUniqueId& new_id) override;
  bool abandoned() const override { return link_.world().abandoned(); }
  // MPI abandoned: nothing it was asked for can finish.
  bool lost() const override { return abandoned(); }
  bool stopping() const override { return link_.stopping(); }
  bool broken() const override { return !link_.broken().ok(); }
  void Break(const absl::Status& why, bool abandon) override { link_.Break(why, abandon); }

 private:
  WorldLink& link_;
  const uint64_t generation_;
};

}  // namespace collective::daemon::engine
