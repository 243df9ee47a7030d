#include "daemon/negotiation/coordinator.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/duplicate_name.h"
#include "daemon/negotiation/mismatch.h"

namespace collective::daemon::negotiation {
namespace {

// The request of a pending tensor's first submitter (every entry has one).
const v1::TensorRequest& FirstRequest(const PendingTensor& pending) {
  return std::find_if(pending.by_rank.begin(), pending.by_rank.end(),
                      [](const auto& submission) { return submission.has_value(); })
      ->value()
      .request;
}

}  // namespace

absl::Status Coordinator::Add(Submission submission, int32_t set_size, int32_t local_members) {
  const int32_t rank = submission.set_rank;
  const v1::TensorRequest& request = submission.request;
  if (const auto refusing = refusing_.find(request.process_set_id());
      refusing != refusing_.end() && !RunsAfterJoin(request.collective())) {
    return RefusedAfterJoin(request.collective(), request.name(), request.process_set_id(),
                            {refusing->second});
  }
  Key key(request.process_set_id(), request.name());
  auto [it, inserted] = table_.try_emplace(key);
  PendingTensor& pending = it->second;
  if (inserted) {
    pending.name = submission.request.name();
    pending.process_set_id = submission.request.process_set_id();
    pending.first_at = submission.at;
    pending.by_rank.resize(set_size);
    pending.expected = local_members;
  } else if (pending.by_rank[rank].has_value()) {
    return DuplicateNameError(
        pending.name, absl::StrCat("rank ", submission.client->topology.rank(), " (request ",
                                   pending.by_rank[rank]->request.request_id(), ")"));
  }
  pending.by_rank[rank] = std::move(submission);
  ++pending.submitted;
  if (IsReady(pending)) {
    PendingTensor ready = std::move(pending);
    table_.erase(it);
    MakeReady(std::move(ready), rank);
  }
  return absl::OkStatus();
}

bool Coordinator::IsReady(const PendingTensor& pending) const {
  if (pending.submitted >= pending.expected) return true;
  if (pending.submitted == 0) return false;
  // Join itself waits for every rank; everything else only for ranks that
  // have not joined. (Joins come from this node's clients only, so across
  // nodes the count is of local ranks, as `expected` is.)
  if (FirstRequest(pending).collective() == v1::COLLECTIVE_JOIN) return false;
  int32_t joined = 0;
  for (size_t rank = 0; rank < pending.by_rank.size(); ++rank) {
    if (!pending.by_rank[rank].has_value() && HasJoined(pending.process_set_id, rank)) ++joined;
  }
  return pending.submitted + joined >= pending.expected;
}

bool Coordinator::HasJoined(int32_t process_set_id, size_t set_rank) const {
  const auto joined = joined_.find(process_set_id);
  return joined != joined_.end() && set_rank < joined->second.size() && joined->second[set_rank];
}

void Coordinator::MakeReady(PendingTensor pending, int32_t completed_by) {
  ReadyTensor ready;
  ready.name = std::move(pending.name);
  ready.process_set_id = pending.process_set_id;
  ready.set_size = static_cast<int32_t>(pending.by_rank.size());
  ready.completed_by = completed_by;
  ready.first_at = pending.first_at;
  ready.ready_at = Clock::now();
  for (auto& submission : pending.by_rank) {
    if (submission.has_value()) ready.submissions.push_back(std::move(*submission));
  }
  const v1::TensorRequest& request = ready.request();
  if (request.group_id() == 0) {
    ready_.push_back(std::move(ready));
    return;
  }
  // A group runs once every one of its tensors is ready, all together.
  const GroupKey key(ready.process_set_id, ready.submissions.front().client->id,
                     request.group_id());
  const uint32_t group_size = std::max<uint32_t>(request.group_size(), 1);
  std::vector<ReadyTensor>& group = groups_[key];
  group.push_back(std::move(ready));
  if (group.size() < group_size) return;
  for (ReadyTensor& member : group) ready_.push_back(std::move(member));
  groups_.erase(key);
}

void Coordinator::Join(int32_t process_set_id, int32_t set_rank, int32_t set_size) {
  std::vector<bool>& joined = joined_[process_set_id];
  joined.resize(set_size, false);
  joined[set_rank] = true;
  std::vector<Key> now_ready;
  for (const auto& [key, pending] : table_) {
    if (key.first == process_set_id && IsReady(pending)) now_ready.push_back(key);
  }
  // Oldest first, so that every daemon (and every run) orders them alike.
  std::sort(now_ready.begin(), now_ready.end(), [&](const Key& a, const Key& b) {
    return table_.at(a).first_at < table_.at(b).first_at;
  });
  for (const Key& key : now_ready) {
    auto it = table_.find(key);
    PendingTensor pending = std::move(it->second);
    table_.erase(it);
    MakeReady(std::move(pending), set_rank);
  }
}

std::vector<std::pair<PendingTensor, absl::Status>> Coordinator::RefuseAfterJoin(
    int32_t process_set_id, int32_t first_joined) {
  std::vector<std::pair<PendingTensor, absl::Status>> refused;
  if (!refusing_.try_emplace(process_set_id, first_joined).second) return refused;
  for (PendingTensor& pending : TakeWithGroups(process_set_id, [](const PendingTensor& pending) {
         return !RunsAfterJoin(FirstRequest(pending).collective());
       })) {
    const v1::TensorRequest& request = FirstRequest(pending);
    absl::Status why =
        RefusedAfterJoin(request.collective(), pending.name, process_set_id, {first_joined});
    refused.emplace_back(std::move(pending), std::move(why));
  }
  return refused;
}

void Coordinator::EndJoin(int32_t process_set_id) {
  joined_.erase(process_set_id);
  refusing_.erase(process_set_id);
}

std::vector<int32_t> Coordinator::Joined(int32_t process_set_id) const {
  std::vector<int32_t> ranks;
  const auto it = joined_.find(process_set_id);
  if (it == joined_.end()) return ranks;
  for (size_t rank = 0; rank < it->second.size(); ++rank) {
    if (it->second[rank]) ranks.push_back(static_cast<int32_t>(rank));
  }
  return ranks;
}

std::vector<ReadyTensor> Coordinator::TakeReady() { return std::exchange(ready_, {}); }

namespace {

const Submission* AsPointer(const std::optional<Submission>& submission) {
  return submission.has_value() ? &*submission : nullptr;
}

PendingTensor AsPending(ReadyTensor& ready) {
  PendingTensor pending{.name = ready.name,
                        .process_set_id = ready.process_set_id,
                        .first_at = ready.first_at,
                        .by_rank = {},
                        .submitted = static_cast<int32_t>(ready.submissions.size())};
  for (Submission& submission : ready.submissions) pending.by_rank.push_back(std::move(submission));
  return pending;
}

}  // namespace

std::vector<PendingTensor> Coordinator::TakeAllPending() {
  std::vector<PendingTensor> pending;
  for (auto& [key, entry] : table_) pending.push_back(std::move(entry));
  table_.clear();
  for (auto& [key, group] : groups_) {
    for (ReadyTensor& ready : group) pending.push_back(AsPending(ready));
  }
  groups_.clear();
  for (ReadyTensor& ready : ready_) pending.push_back(AsPending(ready));
  ready_.clear();
  joined_.clear();
  refusing_.clear();
  return pending;
}

std::vector<PendingTensor> Coordinator::TakePending(int32_t process_set_id) {
  std::vector<PendingTensor> pending;
  absl::erase_if(table_, [&](auto& entry) {
    if (entry.first.first != process_set_id) return false;
    pending.push_back(std::move(entry.second));
    return true;
  });
  absl::erase_if(groups_, [&](auto& entry) {
    if (std::get<0>(entry.first) != process_set_id) return false;
    for (ReadyTensor& ready : entry.second) pending.push_back(AsPending(ready));
    return true;
  });
  std::erase_if(ready_, [&](ReadyTensor& ready) {
    if (ready.process_set_id != process_set_id) return false;
    pending.push_back(AsPending(ready));
    return true;
  });
  joined_.erase(process_set_id);
  refusing_.erase(process_set_id);
  return pending;
}

std::vector<PendingTensor> Coordinator::TakeTensor(int32_t process_set_id,
                                                   const std::string& name) {
  return TakeWithGroups(process_set_id,
                        [&](const PendingTensor& pending) { return pending.name == name; });
}

std::vector<PendingTensor> Coordinator::TakeWithGroups(
    int32_t process_set_id, absl::FunctionRef<bool(const PendingTensor&)> pick) {
  std::vector<PendingTensor> taken;
  absl::erase_if(table_, [&](auto& entry) {
    if (entry.first.first != process_set_id || !pick(entry.second)) return false;
    taken.push_back(std::move(entry.second));
    return true;
  });
  if (taken.empty()) return taken;

  // Group ids are the submitting client's: a sibling is a tensor that some
  // client submitted under the same group id as its part of a taken one.
  // Ranks that disagree on a group's members chain groups together, so
  // take the closure.
  absl::flat_hash_set<std::pair<uint64_t, uint64_t>> groups;  // client id, group id
  const auto in_group = [&](const Submission& submission) {
    return groups.contains(std::pair(submission.client->id, submission.request.group_id()));
  };
  const auto note_groups = [&](const auto& submissions) {
    for (const auto& submission : submissions) {
      const Submission* s = AsPointer(submission);
      if (s != nullptr && s->request.group_id() != 0) {
        groups.emplace(s->client->id, s->request.group_id());
      }
    }
  };
  for (size_t next = 0; next < taken.size(); ++next) {
    note_groups(taken[next].by_rank);
    if (groups.empty()) continue;
    absl::erase_if(table_, [&](auto& entry) {
      if (entry.first.first != process_set_id) return false;
      const bool sibling =
          std::any_of(entry.second.by_rank.begin(), entry.second.by_rank.end(),
                      [&](const auto& submission) { return submission && in_group(*submission); });
      if (sibling) taken.push_back(std::move(entry.second));
      return sibling;
    });
    absl::erase_if(groups_, [&](auto& entry) {
      if (std::get<0>(entry.first) != process_set_id) return false;
      const bool sibling =
          std::any_of(entry.second.begin(), entry.second.end(), [&](const ReadyTensor& ready) {
            return std::any_of(ready.submissions.begin(), ready.submissions.end(), in_group);
          });
      if (!sibling) return false;
      for (ReadyTensor& ready : entry.second) taken.push_back(AsPending(ready));
      return true;
    });
  }
  return taken;
}

void SortOldestFirst(std::vector<WaitingTensor>& waiting) {
  std::sort(waiting.begin(), waiting.end(),
            [](const WaitingTensor& a, const WaitingTensor& b) { return a.first_at < b.first_at; });
}

std::vector<WaitingTensor> Coordinator::Waiting(const job::ProcessSetTable& sets,
                                                absl::FunctionRef<bool(int32_t)> is_local) const {
  std::vector<WaitingTensor> waiting;
  waiting.reserve(table_.size());
  for (const auto& [key, entry] : table_) {
    const job::ProcessSet* set = sets.Find(entry.process_set_id);
    WaitingTensor tensor{.process_set_id = entry.process_set_id,
                         .name = entry.name,
                         .collective = v1::COLLECTIVE_UNSPECIFIED,
                         .first_at = entry.first_at};
    for (size_t rank = 0; rank < entry.by_rank.size(); ++rank) {
      const int32_t global = set != nullptr ? set->ranks[rank] : static_cast<int32_t>(rank);
      const auto& submission = entry.by_rank[rank];
      if (submission.has_value()) {
        tensor.collective = submission->request.collective();
        tensor.ready_ranks.push_back(global);
      } else if (is_local(global) && !HasJoined(entry.process_set_id, rank)) {
        tensor.missing_ranks.push_back(global);
      }
    }
    waiting.push_back(std::move(tensor));
  }
  SortOldestFirst(waiting);
  return waiting;
}

bool RunsAfterJoin(v1::Collective collective) {
  return collective == v1::COLLECTIVE_ALLREDUCE || collective == v1::COLLECTIVE_JOIN;
}

bool CarriesData(v1::Collective collective) {
  switch (collective) {
    case v1::COLLECTIVE_ALLREDUCE:
    case v1::COLLECTIVE_REDUCESCATTER:
    case v1::COLLECTIVE_ALLGATHER:
    case v1::COLLECTIVE_BROADCAST:
    case v1::COLLECTIVE_ALLTOALL:
    case v1::COLLECTIVE_REDUCE:
    case v1::COLLECTIVE_GATHER:
    case v1::COLLECTIVE_SCATTER:
    case v1::COLLECTIVE_SEND:
    case v1::COLLECTIVE_RECV:
      return true;
    default:
      return false;
  }
}

}  // namespace collective::daemon::negotiation
