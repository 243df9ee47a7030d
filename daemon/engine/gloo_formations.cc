#include "daemon/engine/gloo_formations.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace collective::daemon::engine {
namespace {

absl::StatusOr<FormedWorld> Form(const GlooFormations::Request& request,
                                 std::shared_ptr<const std::atomic<bool>> cancelled) {
  ASSIGN_OR_RETURN_WITH(const HostPort address, ParseHostPort(request.rendezvous),
                        "the job's rendezvous");
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(request.world.deadline - Clock::now());
  FormedWorld formed;
  formed.store = std::make_unique<gloo::HttpStore>(
      gloo::HttpStoreOptions{.host = address.host,
                             .port = address.port,
                             .scope = "collectived",
                             .timeout = std::max(left, std::chrono::milliseconds(1)),
                             .cancelled = std::move(cancelled)});
  ASSIGN_OR_RETURN(formed.world, gloo::JobWorld::Form(*formed.store, request.world));
  return formed;
}

}  // namespace

GlooFormations::~GlooFormations() {
  for (Running& running : threads_) running.cancelled->store(true);
  for (Running& running : threads_) running.thread.join();
}

void GlooFormations::Start(Request request) {
  Running& running = threads_.emplace_back();
  running.thread = std::thread([this, &running, request = std::move(request)] {
    absl::StatusOr<FormedWorld> formed = Form(request, running.cancelled);
    if (!formed.ok()) {
      formed = absl::Status(formed.status().code(),
                            absl::StrCat("job '", request.world.job_id,
                                         "' could not form its world through the rendezvous at ",
                                         request.rendezvous, ": ", formed.status().message()));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.push_back({.job_sequence = request.job_sequence, .formed = std::move(formed)});
      running.ended = true;
    }
    wake_();
  });
}

std::vector<GlooFormations::Done> GlooFormations::Take() {
  std::vector<Done> done;
  std::list<Running> ended;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done = std::exchange(done_, {});
    for (auto it = threads_.begin(); it != threads_.end();) {
      auto next = std::next(it);
      if (it->ended) ended.splice(ended.end(), threads_, it);
      it = next;
    }
  }
  for (Running& running : ended) running.thread.join();
  return done;
}

}  // namespace collective::daemon::engine
