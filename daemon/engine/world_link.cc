#include "daemon/engine/world_link.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon::engine {
namespace {

// A daemon that stops is heard within this, not on every look: each look for
// its notice is a call into MPI (a poll of the TCP sockets), and while a
// small allreduce runs across nodes the engine looks every few microseconds.
constexpr auto kStopNoticeLook = std::chrono::milliseconds(1);

}  // namespace

WorldLink::WorldLink(const config::DaemonConfig& config, StopRequest stop, Listener& listener)
    : config_(config), stop_(std::move(stop)), listener_(listener) {}

absl::Status WorldLink::Start() {
  const world::WorldMode mode = config_.multi_node == config::MultiNode::kOff
                                    ? world::WorldMode::kSingle
                                    : world::WorldMode::kAuto;
  auto world = world::World::Create(mode);
  if (!world.ok()) return world.status();
  world_ = std::move(*world);
  return absl::OkStatus();
}

void WorldLink::Finish() {
  if (world_ == nullptr) return;
  if (exchange_ != nullptr && exchange_->in_flight()) abandoned_.push_back(std::move(exchange_));
  exchange_.reset();
  if (!abandoned_.empty()) world_->Abandon();
  world_->AnnounceStop();
  if (world_->abandoned()) {
    (void)world_.release();
  } else {
    world_.reset();
  }
}

absl::Status WorldLink::StartExchange(const job::Job& job) {
  auto exchange = world::NodeExchange::Start(
      *world_, {.local_size = job.local_size(),
                .job_id = job.id(),
                .settings = {.fusion_threshold_bytes = config_.fusion_threshold_bytes,
                             .cross_node_chunk_bytes = config_.cross_node_chunk_bytes,
                             .response_cache_capacity = config_.response_cache_capacity,
                             .autotune = static_cast<uint8_t>(config_.autotune ? 1 : 0)}});
  if (!exchange.ok()) {
    Break(exchange.status(), /*abandon_mpi=*/true);
    return exchange.status();
  }
  exchange_ = std::move(*exchange);
  ++generation_;
  log::Coord().info("job '{}': all {} local ranks registered; waiting for the other {} nodes",
                    job.id(), job.local_size(), world_->size() - 1);
  return absl::OkStatus();
}

std::optional<absl::StatusOr<job::NodeLayout>> WorldLink::PollExchange() {
  if (exchange_ == nullptr || world_->abandoned()) return std::nullopt;
  std::optional<absl::StatusOr<job::NodeLayout>> layout = exchange_->Poll();
  if (layout.has_value()) exchange_.reset();
  return layout;
}

void WorldLink::AbandonExchange(const absl::Status& why) {
  if (exchange_ == nullptr) return;
  if (exchange_->in_flight()) {
    abandoned_.push_back(std::move(exchange_));
    broken_ = absl::FailedPreconditionError(
        absl::StrCat("this daemon's MPI world could not form an earlier job (", why.message(),
                     "); the daemons must be restarted together"));
  }
  exchange_.reset();
}

void WorldLink::LookForStopNotices(Clock::time_point now) {
  if (!waits() || now < next_stop_look_) return;
  next_stop_look_ = now + kStopNoticeLook;
  if (const int stopping = world_->TakeStopNotice(); stopping >= 0) {
    Break(absl::UnavailableError(absl::StrCat("the daemon of node ", stopping, " is stopping")),
          /*abandon_mpi=*/false);
  }
}

void WorldLink::Break(const absl::Status& why, bool abandon_mpi) {
  if (world_->single()) return;
  if (abandon_mpi && !world_->abandoned()) {
    world_->Abandon();
    exit_code_ = 3;
    // Nothing decided can finish without MPI.
    listener_.WorldAbandoned(absl::UnavailableError(why.message()));
  }
  // A daemon that stops forms no other job.
  if (!broken_.ok() || stopping_) return;
  broken_ = absl::FailedPreconditionError(
      absl::StrCat("the MPI world of this job's daemons broke (", why.message(),
                   "); it cannot form another job: restart the daemons together (mpirun, srun)"));
  log::Mpi().warn("{}", broken_.message());
  if (!listener_.ServesJobs()) RequestStop();
}

void WorldLink::RequestStop() {
  if (stop_requested_ || stop_ == nullptr) return;
  stop_requested_ = true;
  stop_(std::string(broken_.message()), exit_code_);
}

}  // namespace collective::daemon::engine
