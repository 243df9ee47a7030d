#include "daemon/set_communicators.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon {
namespace {

// The tag of MPI_Comm_create_group, which runs on the control communicator
// (only point-to-point traffic goes there, none on this tag) so that it
// never meets the data communicator's transfers still in flight.
constexpr int kCreateTag = 100;

}  // namespace

SetSpan::~SetSpan() {
  if (owned && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
}

int32_t SetSpan::IndexOf(int32_t set_rank) const {
  const auto after = std::upper_bound(first.begin(), first.end(), set_rank);
  return static_cast<int32_t>(after - first.begin()) - 1;
}

std::unique_ptr<SetSpan> SpanOf(const ProcessSet& set, const NodeLayout& layout) {
  auto span = std::make_unique<SetSpan>();
  span->index = -1;
  for (int32_t set_rank = 0; set_rank < set.size(); ++set_rank) {
    const int32_t node = layout.NodeOf(set.ranks[set_rank]);
    if (span->nodes.empty() || span->nodes.back() != node) {
      if (node == layout.node) span->index = span->size();
      span->nodes.push_back(node);
      span->first.push_back(set_rank);
      span->count.push_back(0);
    }
    ++span->count.back();
  }
  return span;
}

SetCommunicators::SetCommunicators(const World& world, NodeLayout layout)
    : world_(world), layout_(std::move(layout)) {}

absl::StatusOr<std::unique_ptr<SetCommunicators>> SetCommunicators::Create(const World& world,
                                                                           NodeLayout layout) {
  std::unique_ptr<SetCommunicators> comms(new SetCommunicators(world, std::move(layout)));
  if (absl::Status duplicated =
          MpiStatus(MPI_Comm_dup(world.data(), &comms->job_comm_), "MPI_Comm_dup for the job");
      !duplicated.ok()) {
    return duplicated;
  }
  MPI_Comm_set_errhandler(comms->job_comm_, MPI_ERRORS_RETURN);
  return comms;
}

absl::Status SetCommunicators::Add(const ProcessSet& set) {
  std::unique_ptr<SetSpan> span = SpanOf(set, layout_);
  if (span->index < 0 || span->size() < 2) return absl::OkStatus();
  if (set.id == 0) {
    span->comm = job_comm_;
    span->owned = true;
  } else {
    MPI_Group world_group = MPI_GROUP_NULL;
    MPI_Group group = MPI_GROUP_NULL;
    MPI_Comm_group(world_.control(), &world_group);
    MPI_Group_incl(world_group, span->size(), span->nodes.data(), &group);
    const absl::Status created =
        MpiStatus(MPI_Comm_create_group(world_.control(), group, kCreateTag, &span->comm),
                  absl::StrCat("MPI_Comm_create_group for process set ", set.id));
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    if (!created.ok()) return created;
    MPI_Comm_set_errhandler(span->comm, MPI_ERRORS_RETURN);
    span->owned = true;
    log::Mpi().debug("process set {} spans nodes [{}]: communicator created", set.id,
                     RanksString(span->nodes));
  }
  spans_[set.id] = std::move(span);
  return absl::OkStatus();
}

std::shared_ptr<const SetSpan> SetCommunicators::Find(int32_t id) const {
  auto it = spans_.find(id);
  return it == spans_.end() ? nullptr : it->second;
}

}  // namespace collective::daemon
