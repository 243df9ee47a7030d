// Negotiation of point-to-point messages: the sends and receives that wait
// for their other half. Unlike a collective, a message involves two ranks
// only, so it is not negotiated by name among the whole set: a send from A to
// B with tag T meets B's receive from A with tag T, the k-th send the k-th
// receive (MPI's non-overtaking rule), and nothing else waits for either. A
// matched pair leaves as a ReadyTensor (the send's submission, then the
// receive's) that runs like any other data collective; whether the two
// agree on bytes and dtype is mismatch.h's business, so that both ranks
// hear the same error. Engine thread only, like the coordinator.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "collective/v1/types.pb.h"
#include "common/clock.h"
#include "common/dtype.h"
#include "daemon/job/process_sets.h"
#include "daemon/negotiation/coordinator.h"

namespace collective::daemon::negotiation {

using ::collective::IsPointToPoint;

// "message from rank 0 to rank 1 with tag 7 (process set 2)": how errors and
// the timeline name a message (ranks within the set).
std::string MessageName(int32_t process_set_id, int32_t source, int32_t destination, int32_t tag);

// A send or receive that waits for its other half, for status.
struct WaitingMessage {
  int32_t process_set_id = 0;
  v1::Collective collective = v1::COLLECTIVE_SEND;  // which half waits
  int32_t rank = 0;                                 // global: the rank whose half waits
  int32_t peer = 0;                                 // global: the rank it waits for
  int32_t tag = 0;
  v1::DataType dtype = v1::DATA_TYPE_UNSPECIFIED;
  uint64_t bytes = 0;
  Clock::time_point since;
};

// `submission`'s half, a send to or a receive from global rank `peer`, as
// status shows it while it waits.
WaitingMessage WaitingOf(const Submission& submission, int32_t peer);

class MessageMatcher {
 public:
  // Records a send (to request.peer_rank) or a receive (from it) of
  // `set`'s rank submission.set_rank. The request's peer is a rank of the
  // set (the validator and the engine checked).
  void Add(Submission submission, const job::ProcessSet& set);

  // The pairs matched since the last call, in the order they matched.
  std::vector<ReadyTensor> TakeMatched();

  // Everything waiting, of every set (the job failed) or of one set (it was
  // removed): the caller fails each.
  std::vector<Submission> TakeAll();
  std::vector<Submission> TakeSet(int32_t process_set_id);

  // Waiting halves, oldest first.
  std::vector<WaitingMessage> Waiting() const;

  bool idle() const { return queues_.empty() && matched_.empty(); }

 private:
  // Process set, source, destination (set ranks), tag.
  using Key = std::tuple<int32_t, int32_t, int32_t, int32_t>;
  struct Half {
    Submission submission;
    int32_t peer = 0;  // global
  };
  // At most one of the two is non-empty: a half that finds the other waiting
  // matches at once.
  struct Queues {
    std::deque<Half> sends;
    std::deque<Half> receives;
  };

  absl::flat_hash_map<Key, Queues> queues_;
  std::vector<ReadyTensor> matched_;
};

}  // namespace collective::daemon::negotiation
