// The job's process sets: subsets of its ranks that run collectives of their
// own. The global set (id 0, every rank) always exists; others are created at
// registration or by an add-process-set collective, and removed ids are
// reused (the smallest free one first), as in Horovod. Ranks within a set are
// counted in ascending order of global rank.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace collective::daemon::job {

struct ProcessSet {
  int32_t id = 0;
  std::vector<int32_t> ranks;  // global ranks, ascending

  int32_t size() const { return static_cast<int32_t>(ranks.size()); }
  // The rank within the set of `global_rank`, or -1 if it is not a member.
  int32_t RankOf(int32_t global_rank) const;
};

class ProcessSetTable {
 public:
  explicit ProcessSetTable(int32_t world_size);

  const ProcessSet* Find(int32_t id) const;
  // The set `id`, or a clear error: no such set, or `global_rank` is not a
  // member of it.
  absl::StatusOr<const ProcessSet*> FindForMember(int32_t id, int32_t global_rank) const;

  // Creates a set of `ranks` (any order, each a rank of the job, at least
  // one, no repeats) that is neither the global set nor an existing one.
  absl::StatusOr<int32_t> Add(std::span<const int32_t> ranks);
  // Removes a set other than the global one.
  absl::Status Remove(int32_t id);

  // Every set, by id.
  const std::map<int32_t, ProcessSet>& sets() const { return sets_; }

  // `ranks` sorted, after checking them as Add does (but not against the
  // existing sets).
  static absl::StatusOr<std::vector<int32_t>> Normalize(std::span<const int32_t> ranks,
                                                        int32_t world_size);

 private:
  int32_t world_size_;
  std::map<int32_t, ProcessSet> sets_;
};

// "[0, 2, 3]".
std::string RanksString(std::span<const int32_t> ranks);

}  // namespace collective::daemon::job
