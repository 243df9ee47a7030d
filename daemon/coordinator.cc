#include "daemon/coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace collective::daemon {

absl::Status Coordinator::Add(int32_t rank, Submission submission) {
  Key key(submission.request.process_set_id(), submission.request.name());
  auto [it, inserted] = table_.try_emplace(key);
  PendingTensor& pending = it->second;
  if (inserted) {
    pending.name = submission.request.name();
    pending.process_set_id = submission.request.process_set_id();
    pending.first_at = submission.at;
    pending.by_rank.resize(size_);
  } else if (pending.by_rank[rank].has_value()) {
    return absl::AlreadyExistsError(
        absl::StrCat("tensor '", pending.name, "' is already outstanding on rank ", rank,
                     " (request ", pending.by_rank[rank]->request.request_id(),
                     "); a name can be submitted again only after its collective has completed"));
  }
  pending.by_rank[rank] = std::move(submission);
  if (++pending.submitted < size_) return absl::OkStatus();

  ReadyTensor ready{.name = std::move(pending.name), .submissions = {}};
  ready.submissions.reserve(size_);
  for (auto& entry : pending.by_rank) ready.submissions.push_back(std::move(*entry));
  table_.erase(it);
  ready_.push_back(std::move(ready));
  return absl::OkStatus();
}

std::vector<ReadyTensor> Coordinator::TakeReady() { return std::exchange(ready_, {}); }

std::vector<PendingTensor> Coordinator::TakeAllPending() {
  std::vector<PendingTensor> pending;
  pending.reserve(table_.size() + ready_.size());
  for (auto& [key, entry] : table_) pending.push_back(std::move(entry));
  table_.clear();
  // Ready tensors that have not run yet fail too.
  for (ReadyTensor& ready : ready_) {
    PendingTensor entry{.name = ready.name,
                        .process_set_id = 0,
                        .first_at = {},
                        .by_rank = {},
                        .submitted = static_cast<int32_t>(ready.submissions.size())};
    for (Submission& submission : ready.submissions) entry.by_rank.push_back(std::move(submission));
    pending.push_back(std::move(entry));
  }
  ready_.clear();
  return pending;
}

void Coordinator::Describe(std::chrono::steady_clock::time_point now,
                           google::protobuf::RepeatedPtrField<v1::PendingTensor>* out) const {
  std::vector<const PendingTensor*> sorted;
  sorted.reserve(table_.size());
  for (const auto& [key, entry] : table_) sorted.push_back(&entry);
  // Oldest first: the tensor a job is stuck on is the one people look for.
  std::sort(sorted.begin(), sorted.end(), [](const PendingTensor* a, const PendingTensor* b) {
    return a->first_at < b->first_at;
  });
  for (const PendingTensor* entry : sorted) {
    v1::PendingTensor* tensor = out->Add();
    tensor->set_name(entry->name);
    tensor->set_process_set_id(entry->process_set_id);
    tensor->set_age_seconds(std::chrono::duration<double>(now - entry->first_at).count());
    for (int32_t rank = 0; rank < size_; ++rank) {
      const auto& submission = entry->by_rank[rank];
      if (submission.has_value()) {
        tensor->set_collective(submission->request.collective());
        tensor->add_ready_ranks(rank);
      } else {
        tensor->add_missing_ranks(rank);
      }
    }
  }
}

}  // namespace collective::daemon
