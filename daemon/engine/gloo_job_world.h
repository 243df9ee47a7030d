// A job's own world among resident daemons (DESIGN.md, "Multi-node"): the
// Gloo contexts the daemons of the job's nodes formed through the job's
// rendezvous (gloo_formations.h forms them off the engine thread), the Gloo
// transport of the job's transfers, its sets' groups and its control link.
// The job's run owns it; breaking it fails that job only, and the daemon
// goes on serving its other jobs and the next. Engine thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "config/daemon_config.h"
#include "daemon/engine/job_world.h"
#include "daemon/gloo/gloo_control_link.h"
#include "daemon/gloo/gloo_transport.h"
#include "daemon/gloo/http_store.h"
#include "daemon/gloo/job_world.h"

namespace collective::daemon::engine {

// What a formation hands the job: the store it met the other nodes through
// (its set groups meet there too) and the world it formed.
struct FormedWorld {
  std::unique_ptr<gloo::HttpStore> store;
  std::unique_ptr<gloo::JobWorld> world;
};

class GlooJobWorld : public JobWorld {
 public:
  // `stopping`: whether the daemon stops (the other nodes hear it with the
  // job's end); `wake`: wakes the engine when a transfer ends.
  GlooJobWorld(const config::DaemonConfig& config, FormedWorld formed,
               std::function<bool()> stopping, std::function<void()> wake);
  // The transport aborts first: no thread of it touches the job's memory
  // once the run's segments go.
  ~GlooJobWorld() override;

  int node() const override { return world_->node(); }
  const std::string& node_name() const override { return world_->hosts()[world_->node()]; }
  exec::NodeTransport& transport() override { return *transport_; }
  absl::StatusOr<std::unique_ptr<exec::SetGroups>> MakeSetGroups(
      const job::NodeLayout& layout) override;
  std::unique_ptr<negotiation::ControlLink> MakeControlLink() override;
  absl::StatusOr<gpu::GlobalLayout> ShareNcclLayout(int local_devices,
                                                    const gpu::NewUniqueId& new_id) override;
  // The transport's threads end when it aborts (when the world breaks, at
  // the latest in the destructor, before the run's segments go), so no
  // transfer keeps the job's memory past the run: nothing is left to the
  // process's exit.
  bool abandoned() const override { return false; }
  bool lost() const override { return lost_; }
  bool stopping() const override { return stopping_(); }
  bool broken() const override { return !broken_.ok(); }
  void Break(const absl::Status& why, bool abandon) override;

 private:
  const config::DaemonConfig& config_;
  // Declared in the order they depend on each other: the store outlives the
  // world, which outlives the transport's contexts.
  std::unique_ptr<gloo::HttpStore> store_;
  std::unique_ptr<gloo::JobWorld> world_;
  std::unique_ptr<gloo::GlooTransport> transport_;
  // The job's control link, owned by its negotiation (which goes before
  // this world does): which node it lost first.
  gloo::GlooControlLink* control_ = nullptr;
  const std::function<bool()> stopping_;
  absl::Status broken_;
  bool lost_ = false;  // broken so that its transfers were aborted
};

}  // namespace collective::daemon::engine
