// Global negotiation across nodes, as in Horovod: node 0 coordinates. Each
// node announces the tensors that all its local members of the process set
// have submitted (by response-cache bit when nothing changed since they were
// last negotiated, else with every local rank's request) and the ranks that
// joined; node 0 decides, in one global order, and sends every node the
// same batches of decisions, which every node carries out in that order so
// that their MPI transfers pair up. Failures travel the same way: a node
// whose job fails tells every other node, and the node monitor's heartbeats
// bound how long a dead or hung daemon goes unnoticed.
//
// A small cached allreduce carries each node's part of the result with its
// bit; node 0 combines the parts as it decides. With peer parts, each node
// also sends its part to the set's other nodes, and a node holding every
// part of a step it announced combines them itself (the same function, the
// same parts in node order, so the same bytes as node 0's) and drops node
// 0's decision of that step when it arrives. Every node counts each cache
// entry's steps alike (node 0's decisions, or a combination made here in
// place of one), so a part names its step and the cache version it was
// sent under, and is combined only with parts of that step and version.
//
// Event-driven: messages are sent when something becomes ready and looked
// for whenever the engine polls; nothing blocks. The messages travel over a
// ControlLink (MPI between daemons, an in-process fake in unit tests).
// Engine thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/v1/negotiation.pb.h"
#include "collective/v1/status.pb.h"
#include "daemon/job/node_layout.h"
#include "daemon/job/process_sets.h"
#include "daemon/negotiation/control_link.h"
#include "daemon/negotiation/coordinator.h"
#include "daemon/negotiation/global_table.h"
#include "daemon/negotiation/node_monitor.h"
#include "daemon/negotiation/response_cache.h"

namespace collective::daemon::negotiation {

class Negotiator {
 public:
  struct Options {
    uint32_t cache_capacity = 1024;
    Clock::duration heartbeat_interval = std::chrono::milliseconds(500);
    Clock::duration node_timeout = std::chrono::seconds(30);
    // Node 0: combines small allreduces' parts (AddReduction) into their
    // decisions; null: the nodes always combine them themselves.
    GlobalCombine combine = nullptr;
    // Each part also goes to the other nodes of the tensor's set (but node
    // 0, which has it with the announcement), and a node other than 0 that
    // holds every node's part of a step it announced combines them itself
    // with `combine`, as node 0 will, instead of waiting for node 0's
    // decision: one hop between daemons instead of two. The decision, when
    // it comes, is let pass.
    bool peer_parts = false;
    // Node 0 sends a batch of combined small allreduces only when
    // SendDecided is called (after running it here), not within Exchange:
    // the other nodes mostly settle those steps from the peers' parts
    // before the batch arrives, and node 0's own ranks then do not wait for
    // its sends. Any other batch, and everything held before it, goes at
    // once.
    bool decisions_after_run = false;
  };

  // What the other nodes sent, for the engine to carry out in order.
  struct Incoming {
    // Node 0's batches of decisions, then (nodes but 0) one of the
    // decisions this node made itself from every node's parts: a cached
    // small allreduce with its combination, as node 0 decides it.
    std::vector<v1::Decisions> batches;

    std::vector<std::pair<int, v1::JobEvent>> events;  // (from node, event)
    // Node 0: announcements arrived (the rest of a tensor's may follow).
    bool heard = false;
  };

  // `link` carries this node's control messages (world/control_channel.h
  // over MPI).
  Negotiator(std::unique_ptr<ControlLink> link, job::NodeLayout layout, GlobalCheck check,
             const Options& options);

  // A tensor ready on this node for a set that spans nodes: `local_members`
  // of the set live here, and those that have not joined all submitted it.
  // Returns the cache bit it was announced by, if it was.
  std::optional<uint32_t> Announce(const ReadyTensor& tensor, const job::ProcessSet& set,
                                   int32_t local_members);
  // This node's part of the allreduce just announced by `bit`, for node 0
  // to combine as it decides (v1::NodeReduction).
  void AddReduction(uint32_t bit, std::string part);
  // A local rank joined.
  void Joined(int32_t process_set_id, int32_t set_rank, int32_t rank);
  // Tells every other node that the job failed or ended here.
  absl::Status Tell(const v1::JobEvent& event);

  // Sends what is due (announcements, heartbeats, node 0's decisions),
  // takes in what arrived, and returns it; the cache has already applied
  // the returned batches. A transport error is returned as is: the world
  // is then broken.
  absl::StatusOr<Incoming> Exchange(const job::ProcessSetTable& sets, Clock::time_point now);
  // Node 0: sends the batches Exchange held back (Options::
  // decisions_after_run), in decision order. The next Exchange sends them
  // too.
  absl::Status SendDecided();
  // Announcements, joins or allreduce parts wait for the next Exchange.
  bool unsent() const {
    return !outgoing_.tensors().empty() || !outgoing_bits_.empty() || !outgoing_.joined().empty() ||
           !peer_outgoing_.empty();
  }

  // The first node this one watches that has been silent past the node
  // timeout, or -1.
  int Silent(Clock::time_point now) const { return monitor_.Silent(now); }
  Clock::duration node_timeout() const { return monitor_.timeout(); }
  Clock::time_point next_heartbeat() const { return monitor_.next_due(); }

  // The entry a cached decision names (live or retired).
  const ResponseCache::Entry* CachedAt(uint32_t bit) const { return cache_.At(bit); }

  // Node 0: tensors some nodes announced and others not yet, and failing
  // one of them on every node (the stall inspector gave up on it).
  std::vector<WaitingTensor> Waiting(const job::ProcessSetTable& sets, Clock::time_point now) const;
  // Another node: the tensors it holds partly submitted past half the stall
  // time, for node 0's stall report (replaces the previous report).
  void ReportPartial(std::vector<v1::PartialTensor> partial);
  bool Fail(int32_t process_set_id, const std::string& name, const absl::Status& why);
  // Node 0: a rank left; what waits fails, now and when announced later.
  void EndAll(const absl::Status& why);
  // Node 0: autotuned values, sent with the next batch of decisions (the
  // latest replaces one not sent yet).
  void Tune(v1::Tuning tuning) { tuning_ = std::move(tuning); }

  bool coordinator() const { return link_->node() == 0; }
  // The link, for the other control messages of the job (point-to-point
  // messages' rendezvous, remote_messages.h).
  ControlLink& link() { return *link_; }
  void Describe(v1::NegotiationStatus* out) const;
  // Adds this job's negotiation counters to the daemon's totals.
  void AddTo(v1::Totals& totals) const;

 private:
  absl::Status ReceiveEvents(Incoming& incoming);
  // Applies a batch's cache changes on this node, and counts it and its
  // cached decisions' steps; drops those of steps this node settled from
  // the other nodes' parts.
  void Apply(v1::Decisions& batch);
  // The nodes of the cached tensor's set, in order.
  std::vector<int> NodesOf(const ResponseCache::Entry& entry) const;
  absl::Status SendPeerParts();
  absl::Status ReceivePeerParts();
  // Nodes but 0: settles the steps whose every node's part is here.
  std::optional<v1::Decisions> CombineFromPeers();
  // Forgets the parts of steps settled here, and of older cache versions.
  void DropStaleParts();
  absl::Status Coordinate(const job::ProcessSetTable& sets, Clock::time_point now,
                          Incoming& incoming);
  absl::Status Follow(Clock::time_point now, Incoming& incoming);
  absl::Status SendDecisions(const v1::Decisions& batch);

  // A cached tensor's steps since it was put at its bit: those settled here
  // (decided by node 0, or combined from every node's part) and node 0's
  // decisions of them applied here. Every node counts the same steps, so
  // the count settled when a node announces a step names that step.
  struct Steps {
    uint64_t settled = 0;
    uint64_t decided = 0;
  };
  using PartKey = std::tuple<uint32_t, uint64_t, uint64_t>;  // bit, cache version, step

  const job::NodeLayout layout_;
  const GlobalCombine combine_;
  const bool peer_parts_enabled_;
  const bool decisions_after_run_;
  std::unique_ptr<ControlLink> link_;
  NodeMonitor monitor_;
  ResponseCache cache_;
  v1::NodeReady outgoing_;
  std::vector<uint32_t> outgoing_bits_;
  uint64_t batches_applied_ = 0;
  uint64_t announced_in_full_ = 0;
  uint64_t announced_from_cache_ = 0;
  uint64_t combined_from_peers_ = 0;
  std::map<uint32_t, Steps> steps_;  // by cache bit
  // Nodes but 0: this node's part of a step it announced, until it settles.
  std::map<uint32_t, v1::PeerPart> own_parts_;                // by cache bit
  std::map<PartKey, std::map<int, std::string>> peer_parts_;  // by node
  std::map<int, v1::PeerParts> peer_outgoing_;                // by node
  // Node 0 only.
  std::unique_ptr<CacheBits> bits_;
  std::unique_ptr<GlobalTable> table_;
  std::optional<v1::Tuning> tuning_;
  std::vector<v1::Decisions> held_;  // decided and run here, not yet sent
};

}  // namespace collective::daemon::negotiation
