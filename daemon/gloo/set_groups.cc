#include "daemon/gloo/set_groups.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace collective::daemon::gloo {

absl::StatusOr<std::shared_ptr<const GlooGroup>> ConnectSetGroup(JobWorld& world, int32_t set_id,
                                                                 uint32_t creation,
                                                                 const std::vector<int32_t>& nodes,
                                                                 Clock::time_point deadline) {
  int index = -1;
  std::vector<std::string> names;
  for (size_t place = 0; place < nodes.size(); ++place) {
    if (nodes[place] == world.node()) index = static_cast<int>(place);
    names.push_back(world.NodeName(nodes[place]));
  }
  if (index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("process set ", set_id, " spans nodes [",
                                                   job::RanksString(nodes), "], not ",
                                                   world.NodeName(world.node())));
  }
  ASSIGN_OR_RETURN_WITH(
      std::shared_ptr<::gloo::Context> context,
      ConnectMesh(world.store(), absl::StrCat("set/", set_id, "/", creation), world.device(), index,
                  static_cast<int>(nodes.size()), names, deadline, world.operation_timeout()),
      absl::StrCat("process set ", set_id, " of job '", world.job_id(), "'"));
  return std::make_shared<const GlooGroup>(std::move(context));
}

absl::StatusOr<std::shared_ptr<const job::SetSpan>> SpanWithGroup(
    JobWorld& world, const std::shared_ptr<const GlooGroup>& job_group, const job::ProcessSet& set,
    uint32_t creation, Clock::time_point deadline) {
  std::unique_ptr<job::SetSpan> span = job::SpanOf(set, world.layout());
  if (span->index < 0 || span->size() < 2) return nullptr;
  if (set.id == 0) {
    span->group = job_group;
  } else {
    ASSIGN_OR_RETURN(span->group, ConnectSetGroup(world, set.id, creation, span->nodes, deadline));
    log::Coord().debug("process set {} spans nodes [{}]: Gloo context connected", set.id,
                       job::RanksString(span->nodes));
  }
  return std::shared_ptr<const job::SetSpan>(std::move(span));
}

SetGroups::SetGroups(JobWorld& world, std::chrono::milliseconds timeout)
    : world_(world),
      timeout_(timeout),
      job_group_(std::make_shared<const GlooGroup>(world.context())) {}

absl::Status SetGroups::Add(const job::ProcessSet& set, Clock::time_point deadline) {
  const uint32_t creation = creations_[set.id]++;
  ASSIGN_OR_RETURN(std::shared_ptr<const job::SetSpan> span,
                   SpanWithGroup(world_, job_group_, set, creation, deadline));
  if (span == nullptr) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mutex_);
  spans_[set.id] = std::move(span);
  return absl::OkStatus();
}

void SetGroups::Remove(int32_t id) {
  std::shared_ptr<const job::SetSpan> removed;  // released outside the lock
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = spans_.find(id);
  if (it == spans_.end()) return;
  removed = std::move(it->second);
  spans_.erase(it);
}

std::shared_ptr<const job::SetSpan> SetGroups::Find(int32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = spans_.find(id);
  return it == spans_.end() ? nullptr : it->second;
}

}  // namespace collective::daemon::gloo
