#include "daemon/engine/gloo_job_world.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/gloo/gloo_control_link.h"
#include "daemon/gloo/set_groups.h"

namespace collective::daemon::engine {
namespace {

std::chrono::milliseconds NodeTimeout(const config::DaemonConfig& config) {
  return std::chrono::ceil<std::chrono::milliseconds>(
      std::chrono::duration<double>(config.node_timeout_seconds));
}

}  // namespace

GlooJobWorld::GlooJobWorld(const config::DaemonConfig& config, FormedWorld formed,
                           std::function<bool()> stopping, std::function<void()> wake)
    : config_(config),
      store_(std::move(formed.store)),
      world_(std::move(formed.world)),
      transport_(std::make_unique<gloo::GlooTransport>(gloo::GlooTransportOptions{
          .timeout = NodeTimeout(config), .wake = std::move(wake), .hosts = world_->hosts()})),
      stopping_(std::move(stopping)) {}

GlooJobWorld::~GlooJobWorld() { transport_->Abort("the job's world was torn down"); }

absl::StatusOr<std::unique_ptr<exec::SetGroups>> GlooJobWorld::MakeSetGroups(
    const job::NodeLayout& /*layout: the world's own*/) {
  return std::unique_ptr<exec::SetGroups>(
      std::make_unique<gloo::SetGroups>(*world_, NodeTimeout(config_)));
}

std::unique_ptr<negotiation::ControlLink> GlooJobWorld::MakeControlLink() {
  auto link = std::make_unique<gloo::GlooControlLink>(*world_);
  control_ = link.get();
  return link;
}

absl::StatusOr<gpu::GlobalLayout> GlooJobWorld::ShareNcclLayout(
    int /*local_devices*/, const gpu::NewUniqueId& /*new_id*/) {
  return absl::UnimplementedError(
      "CUDA tensors across the nodes of a job world among resident daemons are not supported "
      "yet: start the daemons under mpirun or srun for CUDA jobs that span nodes");
}

void GlooJobWorld::Break(const absl::Status& why, bool abandon) {
  if (broken_.ok()) {
    broken_ = why;
    log::Coord().warn("the world of job '{}' broke: {}", world_->job_id(), why.message());
  }
  // Transfers that cannot finish stop now. When the control link lost a
  // node, the goodbyes name that node, so that every node's transfers name
  // the node that is gone rather than this one, which merely leaves.
  if (!abandon) return;
  lost_ = true;
  transport_->Abort(std::string(why.message()), control_ ? control_->first_gone() : -1);
}

}  // namespace collective::daemon::engine
