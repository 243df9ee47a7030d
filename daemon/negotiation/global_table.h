// Node 0's table of negotiation across nodes: which ranks of each tensor's
// process set have announced it (in full, or by its response-cache bit),
// which have joined, and — once every rank of the set has done one or the
// other — the decision every node carries out: run it, or fail it with the
// error every rank receives. Decisions come out in the order tensors became
// ready everywhere, which is the order every node runs them in.
//
// Pure bookkeeping (no MPI), so that tests can drive it: the negotiator
// feeds it every node's NodeReady, node 0's own included, and sends the
// batches it returns.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "collective/v1/negotiation.pb.h"
#include "collective/v1/status.pb.h"
#include "daemon/job/node_layout.h"
#include "daemon/job/process_sets.h"
#include "daemon/negotiation/coordinator.h"
#include "daemon/negotiation/response_cache.h"

namespace collective::daemon::negotiation {

// Node 0's check of a tensor, given every rank's request (ranks that joined
// are absent): OK, or the error every rank receives.
using GlobalCheck = absl::Status (*)(const ReadyTensor& everyone);

// Node 0's combination of a small cached allreduce's parts (NodeReduction),
// one per node of its set in node order, given every rank's request: the
// bytes every node takes as the combined result, or nullopt when the nodes
// must combine them themselves (a part is malformed).
using GlobalCombine = std::optional<std::string> (*)(const std::vector<v1::RankRequest>& everyone,
                                                     const std::vector<const std::string*>& parts);

class GlobalTable {
 public:
  struct Counters {
    uint64_t decided_in_full = 0;
    uint64_t decided_from_cache = 0;
    uint64_t decided_combined = 0;  // of those from the cache
  };

  // `cache` is node 0's copy of the response cache (the negotiator applies
  // the batches to it); `bits` hands out its bits. `combine`, when given,
  // combines the parts of small allreduces that every node sent with their
  // cache bits into their decisions.
  GlobalTable(job::NodeLayout layout, GlobalCheck check, const ResponseCache& cache,
              CacheBits& bits, GlobalCombine combine = nullptr);

  // What node `from` sent, in arrival order (node 0's own announcements
  // too). Decisions it completes are added to the batch being built.
  void Take(int from, const v1::NodeReady& ready, const job::ProcessSetTable& sets,
            Clock::time_point now);

  // Fails a waiting tensor on every rank (the stall inspector gave up on
  // it); false if it is not waiting.
  bool Fail(int32_t process_set_id, const std::string& name, const absl::Status& why);

  // A rank left the job: nothing waiting can complete any more. Every
  // waiting tensor fails now, and every one announced later at once.
  void EndAll(const absl::Status& why);

  // The decisions made since the last call, as the next batch (every node
  // applies the batches in this order); nullopt when there are none.
  std::optional<v1::Decisions> TakeBatch();

  // Tensors waited on across nodes: those some node announced, and those
  // only partly submitted on some node (the nodes' stall reports), with
  // every rank that submitted them; oldest first.
  std::vector<WaitingTensor> Waiting(const job::ProcessSetTable& sets, Clock::time_point now) const;
  const Counters& counters() const { return counters_; }

 private:
  using Key = std::pair<int32_t, std::string>;

  struct Entry {
    std::vector<std::optional<v1::RankRequest>> by_set_rank;
    int32_t submitted = 0;
    v1::Collective collective = v1::COLLECTIVE_UNSPECIFIED;
    Clock::time_point first_at;
    uint64_t sequence = 0;  // order of first announcement
    bool all_from_cache = true;
    std::optional<uint32_t> cache_bit;  // the bit the cached announcements named
    // Nodes that announced it, and by node its part of a small allreduce,
    // sent with the cache bit.
    std::set<int> from_nodes;
    std::map<int, std::string> parts;
  };

  // An announcement that came ahead of its tensor's decision: its node had
  // already announced the tensor's pending step. A node that combines small
  // allreduces from the other nodes' parts (PeerPart) settles a step before
  // node 0 decides it and may announce the next one before another node's
  // announcement of this one arrives here. It is taken, in arrival order,
  // once the pending step is decided.
  struct Ahead {
    int from = 0;
    google::protobuf::RepeatedPtrField<v1::RankRequest> ranks;
    std::optional<uint32_t> cache_bit;
    std::optional<std::string> part;
    Clock::time_point at;
  };

  struct Joins {
    std::vector<bool> joined;  // by set rank
    int32_t first = -1;        // the set rank that joined first: refusals name it
    int32_t last = -1;         // the set rank that joined last
  };

  // `replayed`: an announcement taken from ahead_ (it goes before the ones
  // still there).
  void Add(int from, int32_t set_id, const std::string& name,
           const google::protobuf::RepeatedPtrField<v1::RankRequest>& ranks,
           std::optional<uint32_t> cache_bit, const std::string* part,
           const job::ProcessSetTable& sets, Clock::time_point now, bool replayed = false);
  // Takes the announcements that waited for their pending step's decision
  // and may enter now; true if any did.
  bool TakeAhead(const job::ProcessSetTable& sets);
  // The job ended (ended_): fails what waits, and what came ahead of it.
  void FailAll();
  // A failed decision of `key` in the batch, without its ranks yet.
  v1::Decision& AddFailure(const Key& key, const absl::Status& why);
  bool IsReady(const Key& key, const Entry& entry) const;
  // A rank of the set has joined: every node hears it, and what waits of
  // the set's collectives other than allreduce and join fails at once
  // (they cannot run, and the ranks still at work may disagree on their
  // names: Coordinator::RefuseAfterJoin).
  void BeginJoin(int32_t set_id, int32_t first_joined);
  // Fails `key` on every rank that announced it if its set has a rank that
  // joined and it is neither allreduce nor join; true if it did.
  bool RefuseIfJoined(const Key& key);
  void DecideReady(const job::ProcessSetTable& sets);
  void Decide(const Key& key, Entry entry, const job::ProcessSetTable& sets);
  // A decision from the cache: the combination of its parts, when every
  // node that announced it sent one.
  void Combine(const Entry& entry, v1::Decision& decision);
  // After a full decision: keep, change or drop the cache entry of the key.
  void UpdateCache(const Key& key, v1::Decision& decision, bool cacheable);

  const job::NodeLayout layout_;
  const GlobalCheck check_;
  const GlobalCombine combine_;
  const ResponseCache& cache_;
  CacheBits& bits_;
  std::map<Key, Entry> table_;
  std::map<Key, std::deque<Ahead>> ahead_;  // by tensor, in arrival order
  uint64_t next_sequence_ = 0;
  std::map<int32_t, Joins> joins_;
  absl::Status ended_;  // why the job ended; OK while it runs
  // By node: its latest report of tensors it holds partly submitted.
  std::map<int, std::vector<v1::PartialTensor>> partial_;
  v1::Decisions batch_;      // being built
  uint64_t next_batch_ = 1;  // the number the batch being built will get
  Counters counters_;
};

}  // namespace collective::daemon::negotiation
