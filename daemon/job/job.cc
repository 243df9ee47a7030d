#include "daemon/job/job.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace collective::daemon::job {

Job::Job(std::string id, int32_t local_size, uint64_t sequence,
         std::chrono::steady_clock::time_point formation_deadline)
    : id_(std::move(id)),
      local_size_(local_size),
      sequence_(sequence),
      formation_deadline_(formation_deadline),
      members_(local_size) {}

Job::~Job() {
  if (doorbell_ != nullptr) doorbell_->Unlink();
}

void Job::AddMember(std::unique_ptr<ClientRecord> client) {
  const int32_t rank = client->local_rank;
  members_[rank] = std::move(client);
}

std::unique_ptr<ClientRecord> Job::RemoveMember(int32_t local_rank) {
  return std::move(members_[local_rank]);
}

ClientRecord* Job::FindClient(uint64_t client_id) const {
  for (const auto& member : members_) {
    if (member && member->id == client_id) return member.get();
  }
  return nullptr;
}

ClientRecord* Job::FindByLink(const SessionLink* link) const {
  for (const auto& member : members_) {
    if (member && member->link.get() == link) return member.get();
  }
  return nullptr;
}

std::vector<int32_t> Job::MissingLocalRanks() const {
  std::vector<int32_t> missing;
  for (int32_t rank = 0; rank < local_size_; ++rank) {
    if (!members_[rank]) missing.push_back(rank);
  }
  return missing;
}

bool Job::empty() const {
  for (const auto& member : members_) {
    if (member) return false;
  }
  return true;
}

bool Job::finished() const {
  for (const auto& member : members_) {
    if (member && member->live()) return false;
  }
  return true;
}

absl::Status Job::Form(std::unique_ptr<ResultArena> results, std::shared_ptr<JobDoorbell> doorbell,
                       const std::vector<std::vector<int32_t>>& static_process_sets,
                       const NodeLayout& layout) {
  layout_ = layout;
  process_sets_ = std::make_unique<ProcessSetTable>(layout.world_size());
  for (const std::vector<int32_t>& ranks : static_process_sets) {
    if (auto added = process_sets_->Add(ranks); !added.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("static process set ", RanksString(ranks), ": ", added.status().message()));
    }
  }
  results_ = std::move(results);
  doorbell_ = std::move(doorbell);
  formed_at_ = absl::Now();
  state_ = JobState::kRunning;
  for (const auto& member : members_) {
    v1::Topology& topology = member->topology;
    topology.set_rank(layout.offset() + member->local_rank);
    topology.set_size(layout.world_size());
    topology.set_local_rank(member->local_rank);
    topology.set_local_size(local_size_);
    topology.set_cross_rank(layout.node);
    topology.set_cross_size(layout.nodes());
    topology.set_is_homogeneous(layout.homogeneous());
  }
  return absl::OkStatus();
}

absl::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kForming:
      return "forming";
    case JobState::kRunning:
      return "running";
    case JobState::kEnding:
      return "ending";
    case JobState::kFailed:
      return "failed";
  }
  return "unknown";
}

void Job::End(absl::Status why) {
  if (state_ == JobState::kEnding || state_ == JobState::kFailed) return;
  state_ = JobState::kEnding;
  failure_ = std::move(why);
}

void Job::Fail(absl::Status why) {
  if (state_ == JobState::kFailed) return;
  state_ = JobState::kFailed;
  failure_ = std::move(why);
}

std::string DescribeLocalRanks(const std::vector<int32_t>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "local rank " : "local ranks ",
                      absl::StrJoin(ranks, ", "));
}

std::string DescribeMember(const ClientRecord& client) {
  const int32_t rank = client.topology.size() > 0 ? client.topology.rank() : client.local_rank;
  return absl::StrCat("rank ", rank, " (pid ", client.peer.pid, ")");
}

std::string DescribeStillIn(const Job& job) {
  std::vector<std::string> members;
  for (const auto& member : job.members()) {
    if (member && member->live()) members.push_back(DescribeMember(*member));
  }
  if (members.empty()) return "";
  return absl::StrCat(absl::StrJoin(members, members.size() == 2 ? " and " : ", "),
                      members.size() == 1 ? " has" : " have");
}

absl::Status SegmentTruncated(const ClientRecord& client) {
  return absl::DataLossError(absl::StrCat(
      DescribeMember(client),
      " truncated its shared-memory segment while the daemon was using it; the job cannot "
      "continue"));
}

absl::StatusOr<ResultSegmentOwner> ChooseResultSegmentOwner(const Job& job, uid_t daemon_uid,
                                                            gid_t daemon_gid) {
  bool same_uid = true;
  bool same_gid = true;
  const ClientRecord* first = nullptr;
  for (const auto& member : job.members()) {
    if (!member) continue;
    if (first == nullptr) {
      first = member.get();
      continue;
    }
    same_uid = same_uid && member->peer.uid == first->peer.uid;
    same_gid = same_gid && member->peer.gid == first->peer.gid;
  }
  if (first == nullptr) return ResultSegmentOwner{daemon_uid, daemon_gid, 0400};
  if (same_gid) return ResultSegmentOwner{daemon_uid, first->peer.gid, 0440};
  if (same_uid) return ResultSegmentOwner{first->peer.uid, first->peer.gid, 0400};
  return absl::PermissionDeniedError(absl::StrCat(
      "the clients of job '", job.id(),
      "' share neither a uid nor a primary gid, so no file mode lets all of them (and only "
      "them) read the job's results; run them as one user or one group"));
}

}  // namespace collective::daemon::job
