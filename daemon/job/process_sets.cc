#include "daemon/job/process_sets.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace collective::daemon::job {

int32_t ProcessSet::RankOf(int32_t global_rank) const {
  const auto it = std::lower_bound(ranks.begin(), ranks.end(), global_rank);
  return it != ranks.end() && *it == global_rank ? static_cast<int32_t>(it - ranks.begin()) : -1;
}

std::string RanksString(std::span<const int32_t> ranks) {
  return absl::StrCat("[", absl::StrJoin(ranks, ", "), "]");
}

ProcessSetTable::ProcessSetTable(int32_t world_size) : world_size_(world_size) {
  ProcessSet global{.id = 0, .ranks = {}};
  for (int32_t rank = 0; rank < world_size; ++rank) global.ranks.push_back(rank);
  sets_.emplace(0, std::move(global));
}

const ProcessSet* ProcessSetTable::Find(int32_t id) const {
  const auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : &it->second;
}

absl::StatusOr<const ProcessSet*> ProcessSetTable::FindForMember(int32_t id,
                                                                 int32_t global_rank) const {
  const ProcessSet* set = Find(id);
  if (set == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("process set ", id, " does not exist"));
  }
  if (set->RankOf(global_rank) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", global_rank,
                                                   " is not a member of process set ", id, " ",
                                                   RanksString(set->ranks)));
  }
  return set;
}

absl::StatusOr<std::vector<int32_t>> ProcessSetTable::Normalize(std::span<const int32_t> ranks,
                                                                int32_t world_size) {
  if (ranks.empty()) return absl::InvalidArgumentError("a process set needs at least one rank");
  std::vector<int32_t> sorted(ranks.begin(), ranks.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", sorted[i], " of process set ", RanksString(ranks),
                       " is not a rank of the job (0 to ", world_size - 1, ")"));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", sorted[i], " is listed twice in process set ", RanksString(ranks)));
    }
  }
  return sorted;
}

absl::StatusOr<int32_t> ProcessSetTable::Add(std::span<const int32_t> ranks) {
  auto sorted = Normalize(ranks, world_size_);
  if (!sorted.ok()) return sorted.status();
  for (const auto& [id, set] : sets_) {
    if (set.ranks != *sorted) continue;
    return absl::AlreadyExistsError(
        id == 0
            ? absl::StrCat("process set ", RanksString(*sorted),
                           " is the global process set (id 0), which always exists")
            : absl::StrCat("process set ", RanksString(*sorted), " exists already (id ", id, ")"));
  }
  int32_t id = 1;
  while (sets_.contains(id)) ++id;
  sets_.emplace(id, ProcessSet{.id = id, .ranks = std::move(*sorted)});
  return id;
}

absl::Status ProcessSetTable::Remove(int32_t id) {
  if (id == 0) return absl::InvalidArgumentError("the global process set (id 0) cannot be removed");
  if (sets_.erase(id) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("process set ", id, " does not exist"));
  }
  return absl::OkStatus();
}

}  // namespace collective::daemon::job
