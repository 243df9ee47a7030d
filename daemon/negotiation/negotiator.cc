#include "daemon/negotiation/negotiator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon::negotiation {
namespace {

// A batch of cached small allreduces that node 0 combined, and nothing else
// (no cache changes, failures, joins or tuning).
bool OnlyCombined(const v1::Decisions& batch) {
  if (batch.has_tuning() || batch.decisions().empty()) return false;
  return std::all_of(
      batch.decisions().begin(), batch.decisions().end(), [](const v1::Decision& decision) {
        return decision.from_cache() && decision.has_combined() && decision.code() == 0 &&
               decision.retire_bits().empty() && !decision.cache_put() && !decision.join_began();
      });
}

}  // namespace

Negotiator::Negotiator(std::unique_ptr<ControlLink> link, job::NodeLayout layout, GlobalCheck check,
                       const Options& options)
    : layout_(std::move(layout)),
      combine_(options.combine),
      peer_parts_enabled_(options.peer_parts && options.combine != nullptr),
      decisions_after_run_(options.decisions_after_run),
      link_(std::move(link)),
      monitor_(*link_, options.heartbeat_interval, options.node_timeout),
      cache_(options.cache_capacity) {
  if (link_->node() == 0) {
    bits_ = std::make_unique<CacheBits>(options.cache_capacity, link_->nodes());
    table_ = std::make_unique<GlobalTable>(layout_, check, cache_, *bits_, options.combine);
  }
}

std::optional<uint32_t> Negotiator::Announce(const ReadyTensor& tensor, const job::ProcessSet& set,
                                             int32_t local_members) {
  // A bit stands for every local member's request: only when none joined.
  if (static_cast<int32_t>(tensor.submissions.size()) == local_members) {
    if (const std::optional<uint32_t> bit = cache_.Match(tensor); bit.has_value()) {
      outgoing_bits_.push_back(*bit);
      ++announced_from_cache_;
      return bit;
    }
  }
  v1::NodeTensor* announced = outgoing_.add_tensors();
  announced->set_process_set_id(tensor.process_set_id);
  announced->set_name(tensor.name);
  for (const Submission& submission : tensor.submissions) {
    v1::RankRequest* rank = announced->add_ranks();
    rank->set_set_rank(submission.set_rank);
    rank->set_rank(set.ranks[submission.set_rank]);
    *rank->mutable_request() = submission.request;
  }
  ++announced_in_full_;
  return std::nullopt;
}

void Negotiator::AddReduction(uint32_t bit, std::string part) {
  v1::NodeReduction reduction;
  reduction.set_cache_bit(bit);
  reduction.set_data(std::move(part));
  const ResponseCache::Entry* entry = cache_.At(bit);
  if (peer_parts_enabled_ && entry != nullptr) {
    v1::PeerPart peer;
    *peer.mutable_reduction() = reduction;
    peer.set_cache_version(cache_.version());
    peer.set_step(steps_[bit].settled);
    for (int node : NodesOf(*entry)) {
      if (node != 0 && node != link_->node()) *peer_outgoing_[node].add_parts() = peer;
    }
    if (!coordinator()) own_parts_[bit] = std::move(peer);
  }
  *outgoing_.add_reductions() = std::move(reduction);
}

std::vector<int> Negotiator::NodesOf(const ResponseCache::Entry& entry) const {
  std::vector<int> nodes;
  for (const v1::RankRequest& rank : entry.ranks) nodes.push_back(layout_.NodeOf(rank.rank()));
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

void Negotiator::Joined(int32_t process_set_id, int32_t set_rank, int32_t rank) {
  v1::JoinedRank* joined = outgoing_.add_joined();
  joined->set_process_set_id(process_set_id);
  joined->set_set_rank(set_rank);
  joined->set_rank(rank);
}

absl::Status Negotiator::Tell(const v1::JobEvent& event) {
  for (int node = 0; node < link_->nodes(); ++node) {
    if (node == link_->node()) continue;
    if (absl::Status sent = link_->Send(node, ControlTag::kJobEvent, event); !sent.ok()) {
      return sent;
    }
  }
  return link_->Progress();
}

void Negotiator::Apply(v1::Decisions& batch) {
  cache_.Apply(batch);
  ++batches_applied_;
  auto& decisions = *batch.mutable_decisions();
  int kept = 0;
  for (int i = 0; i < decisions.size(); ++i) {
    const v1::Decision& decision = decisions[i];
    // Every step of a cached tensor counts, also one decided in full while
    // its entry stays (a node announced it in full with the same requests).
    std::optional<uint32_t> bit;
    if (decision.from_cache()) {
      bit = decision.cache_bit();
    } else if (decision.cache_put()) {
      // A new entry: its steps count from here on every node.
      steps_.erase(decision.cache_bit());
      own_parts_.erase(decision.cache_bit());
    } else if (!decision.join_began()) {
      bit = cache_.BitOf({decision.process_set_id(), decision.name()});
    }
    if (bit.has_value()) {
      Steps& steps = steps_[*bit];
      if (steps.decided++ < steps.settled && decision.from_cache()) {
        continue;  // a step settled here from every node's part
      }
      steps.settled = std::max(steps.settled, steps.decided);
      if (auto own = own_parts_.find(*bit);
          own != own_parts_.end() && own->second.step() < steps.settled) {
        own_parts_.erase(own);
      }
    }
    if (kept != i) decisions.SwapElements(kept, i);
    ++kept;
  }
  decisions.DeleteSubrange(kept, decisions.size() - kept);
  DropStaleParts();
}

absl::Status Negotiator::SendPeerParts() {
  for (auto& [node, parts] : peer_outgoing_) {
    if (absl::Status sent = link_->Send(node, ControlTag::kPeerParts, parts); !sent.ok()) {
      return sent;
    }
  }
  peer_outgoing_.clear();
  return absl::OkStatus();
}

absl::Status Negotiator::ReceivePeerParts() {
  std::vector<ControlLink::Received> received;
  if (absl::Status read = link_->Receive(ControlTag::kPeerParts, received); !read.ok()) {
    return read;
  }
  if (!peer_parts_enabled_ || coordinator()) return absl::OkStatus();  // node 0 decides them anyway
  for (ControlLink::Received& message : received) {
    v1::PeerParts parts;
    if (!parts.ParseFromString(message.bytes)) {
      return absl::DataLossError(
          absl::StrCat("node ", message.from, " sent unreadable allreduce parts"));
    }
    for (v1::PeerPart& part : *parts.mutable_parts()) {
      peer_parts_[PartKey(part.reduction().cache_bit(), part.cache_version(), part.step())]
                 [message.from] = std::move(*part.mutable_reduction()->mutable_data());
    }
  }
  DropStaleParts();
  return absl::OkStatus();
}

void Negotiator::DropStaleParts() {
  for (auto it = peer_parts_.begin(); it != peer_parts_.end();) {
    const auto& [bit, version, step] = it->first;
    const auto steps = steps_.find(bit);
    const bool settled =
        version == cache_.version() && steps != steps_.end() && step < steps->second.settled;
    it = version < cache_.version() || settled ? peer_parts_.erase(it) : std::next(it);
  }
}

std::optional<v1::Decisions> Negotiator::CombineFromPeers() {
  v1::Decisions combined;
  for (auto own = own_parts_.begin(); own != own_parts_.end();) {
    const uint32_t bit = own->first;
    const v1::PeerPart& part = own->second;
    const ResponseCache::Entry* entry = cache_.At(bit);
    const auto peers = peer_parts_.find(PartKey(bit, part.cache_version(), part.step()));
    if (part.cache_version() != cache_.version() || entry == nullptr ||
        peers == peer_parts_.end()) {
      ++own;  // node 0's decision settles it
      continue;
    }
    const std::vector<int> nodes = NodesOf(*entry);
    std::vector<const std::string*> parts;  // in node order, as node 0 combines them
    for (int node : nodes) {
      if (node == link_->node()) {
        parts.push_back(&part.reduction().data());
      } else if (auto peer = peers->second.find(node); peer != peers->second.end()) {
        parts.push_back(&peer->second);
      } else {
        break;
      }
    }
    if (parts.size() != nodes.size()) {
      ++own;
      continue;
    }
    std::optional<std::string> result = combine_(entry->ranks, parts);
    peer_parts_.erase(peers);
    own = own_parts_.erase(own);
    // A malformed part: node 0's decision leaves it to every node's MPI.
    if (!result.has_value()) continue;
    v1::Decision& decision = *combined.add_decisions();
    decision.set_from_cache(true);
    decision.set_cache_bit(bit);
    decision.set_combined(std::move(*result));
    ++steps_[bit].settled;
    ++combined_from_peers_;
  }
  if (combined.decisions().empty()) return std::nullopt;
  return combined;
}

absl::Status Negotiator::ReceiveEvents(Incoming& incoming) {
  std::vector<ControlLink::Received> received;
  if (absl::Status read = link_->Receive(ControlTag::kJobEvent, received); !read.ok()) {
    return read;
  }
  for (ControlLink::Received& message : received) {
    v1::JobEvent event;
    if (!event.ParseFromString(message.bytes)) {
      return absl::DataLossError(
          absl::StrCat("node ", message.from, " sent an unreadable job event"));
    }
    incoming.events.emplace_back(message.from, std::move(event));
  }
  return absl::OkStatus();
}

absl::StatusOr<Negotiator::Incoming> Negotiator::Exchange(const job::ProcessSetTable& sets,
                                                          Clock::time_point now) {
  Incoming incoming;
  absl::Status status = SendDecided();
  if (status.ok()) status = coordinator() ? Coordinate(sets, now, incoming) : Follow(now, incoming);
  if (status.ok()) status = ReceivePeerParts();
  if (status.ok() && !coordinator()) {
    if (std::optional<v1::Decisions> combined = CombineFromPeers(); combined.has_value()) {
      incoming.batches.push_back(std::move(*combined));
    }
  }
  if (status.ok()) status = SendPeerParts();
  if (status.ok()) status = ReceiveEvents(incoming);
  if (status.ok()) status = link_->Progress();
  if (!status.ok()) return status;
  return incoming;
}

absl::Status Negotiator::Coordinate(const job::ProcessSetTable& sets, Clock::time_point now,
                                    Incoming& incoming) {
  // A node's heartbeat is its NodeReady, which also says how many batches
  // it has applied: the acknowledgement never runs ahead of the cache bits
  // the same node announced before it.
  std::vector<ControlLink::Received> received;
  if (absl::Status read = link_->Receive(ControlTag::kReady, received); !read.ok()) return read;
  incoming.heard = !received.empty();
  v1::NodeReady own = std::exchange(outgoing_, {});
  own.set_cache_bits(PackBits(std::exchange(outgoing_bits_, {})));
  table_->Take(0, own, sets, now);
  for (const ControlLink::Received& message : received) {
    v1::NodeReady ready;
    if (!ready.ParseFromString(message.bytes)) {
      return absl::DataLossError(
          absl::StrCat("node ", message.from, " sent an unreadable message"));
    }
    table_->Take(message.from, ready, sets, now);
    bits_->Acknowledge(message.from, ready.batches_applied());
  }
  if (std::optional<v1::Decisions> batch = table_->TakeBatch(); batch.has_value()) {
    if (tuning_.has_value()) *batch->mutable_tuning() = *std::exchange(tuning_, std::nullopt);
    if (decisions_after_run_ && OnlyCombined(*batch)) {
      held_.push_back(*batch);
    } else if (absl::Status sent = SendDecided(); !sent.ok()) {
      return sent;
    } else if (sent = SendDecisions(*batch); !sent.ok()) {
      return sent;
    }
    Apply(*batch);
    bits_->Acknowledge(0, batches_applied_);
    incoming.batches.push_back(std::move(*batch));
    monitor_.Sent(now);  // the batch was everyone's heartbeat
  } else if (monitor_.Due(now)) {
    v1::Heartbeat heartbeat;
    heartbeat.set_batches_applied(batches_applied_);
    for (int node = 1; node < link_->nodes(); ++node) {
      if (absl::Status sent = link_->Send(node, ControlTag::kHeartbeat, heartbeat); !sent.ok()) {
        return sent;
      }
    }
    monitor_.Sent(now);
  }
  return absl::OkStatus();
}

absl::Status Negotiator::SendDecisions(const v1::Decisions& batch) {
  for (int node = 1; node < link_->nodes(); ++node) {
    if (absl::Status sent = link_->Send(node, ControlTag::kDecisions, batch); !sent.ok()) {
      return sent;
    }
  }
  return absl::OkStatus();
}

absl::Status Negotiator::SendDecided() {
  for (const v1::Decisions& batch : held_) {
    if (absl::Status sent = SendDecisions(batch); !sent.ok()) return sent;
  }
  held_.clear();
  return absl::OkStatus();
}

absl::Status Negotiator::Follow(Clock::time_point now, Incoming& incoming) {
  // Decisions first, so that this node's announcement carries them as
  // applied.
  std::vector<ControlLink::Received> received;
  if (absl::Status read = link_->Receive(ControlTag::kDecisions, received); !read.ok()) {
    return read;
  }
  for (const ControlLink::Received& message : received) {
    v1::Decisions batch;
    if (!batch.ParseFromString(message.bytes)) {
      return absl::DataLossError(absl::StrCat("node ", message.from, " sent unreadable decisions"));
    }
    Apply(batch);
    if (!batch.decisions().empty() || batch.has_tuning()) {
      incoming.batches.push_back(std::move(batch));
    }
  }
  received.clear();
  if (absl::Status read = link_->Receive(ControlTag::kHeartbeat, received); !read.ok()) {
    return read;
  }
  if (!outgoing_.tensors().empty() || !outgoing_.joined().empty() || !outgoing_bits_.empty() ||
      outgoing_.has_partial() || monitor_.Due(now)) {
    // An empty announcement is this node's heartbeat.
    outgoing_.set_cache_bits(PackBits(std::exchange(outgoing_bits_, {})));
    outgoing_.set_batches_applied(batches_applied_);
    if (absl::Status sent = link_->Send(0, ControlTag::kReady, outgoing_); !sent.ok()) {
      return sent;
    }
    outgoing_.Clear();
    monitor_.Sent(now);
  }
  return absl::OkStatus();
}

std::vector<WaitingTensor> Negotiator::Waiting(const job::ProcessSetTable& sets,
                                               Clock::time_point now) const {
  return table_ != nullptr ? table_->Waiting(sets, now) : std::vector<WaitingTensor>{};
}

void Negotiator::ReportPartial(std::vector<v1::PartialTensor> partial) {
  outgoing_.set_has_partial(true);
  outgoing_.clear_partial();
  for (v1::PartialTensor& tensor : partial) *outgoing_.add_partial() = std::move(tensor);
}

bool Negotiator::Fail(int32_t process_set_id, const std::string& name, const absl::Status& why) {
  return table_ != nullptr && table_->Fail(process_set_id, name, why);
}

void Negotiator::AddTo(v1::Totals& totals) const {
  totals.set_announced_in_full(totals.announced_in_full() + announced_in_full_);
  totals.set_announced_from_cache(totals.announced_from_cache() + announced_from_cache_);
  totals.set_combined_from_peers(totals.combined_from_peers() + combined_from_peers_);
  if (table_ != nullptr) {
    totals.set_decided_in_full(totals.decided_in_full() + table_->counters().decided_in_full);
    totals.set_decided_from_cache(totals.decided_from_cache() +
                                  table_->counters().decided_from_cache);
    totals.set_decided_combined(totals.decided_combined() + table_->counters().decided_combined);
  }
}

void Negotiator::EndAll(const absl::Status& why) {
  if (table_ != nullptr) table_->EndAll(why);
}

void Negotiator::Describe(v1::NegotiationStatus* out) const {
  out->set_node(link_->node());
  out->set_nodes(link_->nodes());
  for (int32_t size : layout_.local_sizes) out->add_local_sizes(size);
  out->set_announced_in_full(announced_in_full_);
  out->set_announced_from_cache(announced_from_cache_);
  out->set_cache_capacity(cache_.capacity());
  out->set_cache_entries(static_cast<uint32_t>(cache_.live_entries()));
  out->set_batches_applied(batches_applied_);
  out->set_combined_from_peers(combined_from_peers_);
  if (table_ != nullptr) {
    out->set_decided_in_full(table_->counters().decided_in_full);
    out->set_decided_from_cache(table_->counters().decided_from_cache);
    out->set_decided_combined(table_->counters().decided_combined);
  }
}

}  // namespace collective::daemon::negotiation
