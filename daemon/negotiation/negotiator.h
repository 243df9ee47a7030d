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
// Event-driven: messages are sent when something becomes ready and looked
// for whenever the engine polls; nothing blocks. The messages travel over a
// ControlLink (MPI between daemons, an in-process fake in unit tests).
// Engine thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
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
  };

  // What the other nodes sent, for the engine to carry out in order.
  struct Incoming {
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
  absl::Status SendReady(Clock::time_point now);
  absl::Status ReceiveEvents(Incoming& incoming);
  // Applies a batch's cache changes on this node, and counts it.
  void Apply(const v1::Decisions& batch);
  absl::Status Coordinate(const job::ProcessSetTable& sets, Clock::time_point now,
                          Incoming& incoming);
  absl::Status Follow(Clock::time_point now, Incoming& incoming);

  const job::NodeLayout layout_;
  std::unique_ptr<ControlLink> link_;
  NodeMonitor monitor_;
  ResponseCache cache_;
  v1::NodeReady outgoing_;
  std::vector<uint32_t> outgoing_bits_;
  uint64_t batches_applied_ = 0;
  uint64_t announced_in_full_ = 0;
  uint64_t announced_from_cache_ = 0;
  // Node 0 only.
  std::unique_ptr<CacheBits> bits_;
  std::unique_ptr<GlobalTable> table_;
  std::optional<v1::Tuning> tuning_;
};

}  // namespace collective::daemon::negotiation
