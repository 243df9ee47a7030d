// Negotiation: the table of tensors that some ranks of a process set have
// submitted and others not yet. A tensor is ready when every rank of its set
// has submitted it — or, except for join itself, has joined (Horovod's join:
// a joined rank no longer holds the others up). Ready tensors come out in the
// order they became ready, which is the order they run in; the tensors of a
// group come out together, once all of them are ready. While a rank of a set
// has joined, the set's collectives other than allreduce and join are
// refused at once, whatever their names (see RefuseAfterJoin).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "collective/v1/negotiation.pb.h"
#include "collective/v1/status.pb.h"
#include "collective/v1/types.pb.h"
#include "common/clock.h"
#include "daemon/job/client_record.h"
#include "daemon/job/process_sets.h"
#include "daemon/job/set_span.h"

namespace collective::daemon::negotiation {

struct Submission {
  job::ClientRecord* client = nullptr;  // null for another node's rank
  int32_t set_rank = 0;                 // within the request's process set
  int32_t rank = 0;                     // global
  v1::TensorRequest request;
  Clock::time_point at;
};

struct PendingTensor {
  std::string name;
  int32_t process_set_id = 0;
  Clock::time_point first_at;
  std::vector<std::optional<Submission>> by_rank;  // by set rank
  int32_t submitted = 0;
  // Submissions that make it ready on this node: the set's size on one
  // node, the set's local members across nodes. Ranks that joined count as
  // submitted, except for join itself.
  int32_t expected = 0;
};

// A tensor some ranks of its set have submitted and others not, for the
// stall inspector and for status.
struct WaitingTensor {
  int32_t process_set_id = 0;
  std::string name;
  v1::Collective collective = v1::COLLECTIVE_UNSPECIFIED;
  Clock::time_point first_at;
  std::vector<int32_t> ready_ranks;    // global
  std::vector<int32_t> missing_ranks;  // global; ranks that joined are neither
  // Across nodes: node 0's entry, or (elsewhere) ready here and waiting for
  // node 0's decision.
  bool across_nodes = false;
};

// Oldest first: the tensor a job is stuck on is the one people look for.
void SortOldestFirst(std::vector<WaitingTensor>& waiting);

// Whether a collective moves tensor data (every one but barrier, join and
// the process-set changes, which the engine answers itself).
bool CarriesData(v1::Collective collective);

// Whether a collective can run while ranks of its set have joined: only
// allreduce (the joined ranks add zeros) and join itself, as in Horovod.
bool RunsAfterJoin(v1::Collective collective);

// A tensor ready to run: one collective.
struct ReadyTensor {
  std::string name;
  int32_t process_set_id = 0;
  int32_t set_size = 0;
  // The ranks that submitted it, in set-rank order; the others had joined.
  std::vector<Submission> submissions;
  // The set rank whose submission (or join) made it ready: for join, the
  // last rank to join.
  int32_t completed_by = 0;
  Clock::time_point first_at;
  Clock::time_point ready_at;
  // Its set spans nodes: `submissions` are this node's members only (none
  // when every one of them joined), and the work here is this node's part,
  // which MPI completes with the other nodes'.
  bool across_nodes = false;
  // Across nodes, once node 0 decided: every submitting rank's request in
  // set-rank order, how the set lies on the nodes (and its communicator),
  // and how many of its ranks live here (those that did not submit joined).
  std::shared_ptr<const std::vector<v1::RankRequest>> everyone;
  std::shared_ptr<const job::SetSpan> span;
  int32_t local_members = 0;
  // Across nodes, a small allreduce that node 0 combined as it decided
  // (v1::Decision::combined): the combination, before the final scale;
  // null when the nodes combine their parts with MPI.
  std::shared_ptr<const std::string> combined;

  const v1::TensorRequest& request() const {
    return submissions.empty() ? everyone->front().request() : submissions.front().request;
  }
  bool has_joined_ranks() const {
    return !across_nodes && static_cast<int32_t>(submissions.size()) < set_size;
  }
};

class Coordinator {
 public:
  // Records `submission`; `set_size` is the size of its process set, of
  // whose ranks `local_members` are on this node (a tensor is ready here
  // once they all submitted it). ALREADY_EXISTS when that rank already has
  // the name outstanding; FAILED_PRECONDITION (RefusedAfterJoin's text) for
  // a collective the set refuses after a join.
  absl::Status Add(Submission submission, int32_t set_size, int32_t local_members);
  absl::Status Add(Submission submission, int32_t set_size) {
    return Add(std::move(submission), set_size, set_size);
  }

  // A rank of a set has joined: what waits only for joined ranks is ready.
  void Join(int32_t process_set_id, int32_t set_rank, int32_t set_size);
  // From now until the set's join completes, the set refuses every
  // collective but allreduce and join, naming `first_joined` (a set rank:
  // the rank whose join began it, so that every rank reads the same text
  // however many ranks have joined by the time it submits). As in Horovod
  // such a collective cannot run while a rank has joined; unlike Horovod,
  // which fails it once every rank at work submitted it, it fails at once:
  // those ranks may disagree on its name (automatic names count calls, and
  // a joined rank made fewer), and then would wait for each other forever.
  // Returns what is pending that the set now refuses, and the
  // rest of their groups, with the error each one's submitters receive; no
  // more when the set refuses already. On one node the engine calls it when
  // a rank joins; across nodes when node 0 says the set's join began, so
  // that every node names the same rank.
  std::vector<std::pair<PendingTensor, absl::Status>> RefuseAfterJoin(int32_t process_set_id,
                                                                      int32_t first_joined);
  // Every rank of the set has joined: the join is over.
  void EndJoin(int32_t process_set_id);
  // Set ranks that have joined.
  std::vector<int32_t> Joined(int32_t process_set_id) const;

  std::vector<ReadyTensor> TakeReady();
  // Everything not yet run, of every set (the job failed) or of one set (it
  // was removed), ready or not: the caller fails each submission.
  std::vector<PendingTensor> TakeAllPending();
  std::vector<PendingTensor> TakePending(int32_t process_set_id);
  // One pending tensor (the stall inspector gave up on it) and, when it
  // belongs to a group, the rest of its group, ready or not: a group runs
  // whole or not at all. Empty when the tensor is not pending.
  std::vector<PendingTensor> TakeTensor(int32_t process_set_id, const std::string& name);

  bool idle() const { return table_.empty() && ready_.empty() && groups_.empty(); }
  const auto& pending() const { return table_; }

  // Pending tensors, oldest first, ranks as global ranks: those that
  // submitted, and those `is_local` that did not and have not joined (the
  // other nodes' ranks are node 0's to know).
  std::vector<WaitingTensor> Waiting(const job::ProcessSetTable& sets,
                                     absl::FunctionRef<bool(int32_t)> is_local) const;

 private:
  using Key = std::pair<int32_t, std::string>;  // process set, name
  // A group: the lowest-rank submitter's client id and group id.
  using GroupKey = std::tuple<int32_t, uint64_t, uint64_t>;

  // Whether `pending` waits for nobody but joined ranks.
  bool IsReady(const PendingTensor& pending) const;
  bool HasJoined(int32_t process_set_id, size_t set_rank) const;
  // Pending tensors of one set (and the rest of their groups), ready or
  // not, that `pick` chooses: a group runs whole or not at all.
  std::vector<PendingTensor> TakeWithGroups(int32_t process_set_id,
                                            absl::FunctionRef<bool(const PendingTensor&)> pick);
  void MakeReady(PendingTensor pending, int32_t completed_by);

  absl::flat_hash_map<Key, PendingTensor> table_;
  absl::flat_hash_map<int32_t, std::vector<bool>> joined_;  // process set -> by set rank
  absl::flat_hash_map<int32_t, int32_t> refusing_;  // process set -> set rank named (first joined)
  absl::flat_hash_map<GroupKey, std::vector<ReadyTensor>> groups_;
  std::vector<ReadyTensor> ready_;
};

}  // namespace collective::daemon::negotiation
