#include "daemon/negotiation/global_table.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/job/set_span.h"
#include "daemon/negotiation/mismatch.h"

namespace collective::daemon::negotiation {
namespace {

// A ReadyTensor of every rank's request, for the checks, with how the set
// lies on the nodes (no group: the checks only read the counts).
ReadyTensor Everyone(const v1::Decision& decision, const job::ProcessSet& set,
                     const job::NodeLayout& layout) {
  ReadyTensor tensor;
  tensor.name = decision.name();
  tensor.process_set_id = decision.process_set_id();
  tensor.set_size = set.size();
  tensor.span = job::SpanOf(set, layout);
  for (const v1::RankRequest& rank : decision.ranks()) {
    tensor.submissions.push_back(Submission{.client = nullptr,
                                            .set_rank = rank.set_rank(),
                                            .rank = rank.rank(),
                                            .request = rank.request(),
                                            .at = {}});
  }
  return tensor;
}

bool SameRequests(const google::protobuf::RepeatedPtrField<v1::RankRequest>& decided,
                  const std::vector<std::string>& cached) {
  if (static_cast<size_t>(decided.size()) != cached.size()) return false;
  for (int i = 0; i < decided.size(); ++i) {
    if (CacheFormBytes(decided[i].request()) != cached[i]) return false;
  }
  return true;
}

}  // namespace

GlobalTable::GlobalTable(job::NodeLayout layout, GlobalCheck check, const ResponseCache& cache,
                         CacheBits& bits, GlobalCombine combine)
    : layout_(std::move(layout)), check_(check), combine_(combine), cache_(cache), bits_(bits) {}

void GlobalTable::Take(int from, const v1::NodeReady& ready, const job::ProcessSetTable& sets,
                       Clock::time_point now) {
  if (ready.has_partial()) {
    partial_[from] = std::vector<v1::PartialTensor>(ready.partial().begin(), ready.partial().end());
  }
  for (const v1::JoinedRank& joined : ready.joined()) {
    const job::ProcessSet* set = sets.Find(joined.process_set_id());
    if (set == nullptr || joined.set_rank() < 0 || joined.set_rank() >= set->size()) continue;
    Joins& joins = joins_[joined.process_set_id()];
    joins.joined.resize(static_cast<size_t>(set->size()), false);
    joins.joined[joined.set_rank()] = true;
    joins.last = joined.set_rank();
    if (joins.first < 0) BeginJoin(joined.process_set_id(), joined.set_rank());
  }
  for (const v1::NodeTensor& tensor : ready.tensors()) {
    Add(from, tensor.process_set_id(), tensor.name(), tensor.ranks(), std::nullopt, nullptr, sets,
        now);
  }
  std::map<uint32_t, const std::string*> parts;
  for (const v1::NodeReduction& reduction : ready.reductions()) {
    parts[reduction.cache_bit()] = &reduction.data();
  }
  for (uint32_t bit : UnpackBits(ready.cache_bits())) {
    const ResponseCache::Entry* entry = cache_.At(bit);
    if (entry == nullptr) {
      log::Coord().error("node {} announced cache bit {}, which holds no tensor; ignored", from,
                         bit);
      continue;
    }
    // The node's ranks' requests are the cached ones.
    google::protobuf::RepeatedPtrField<v1::RankRequest> ranks;
    for (const v1::RankRequest& rank : entry->ranks) {
      if (layout_.NodeOf(rank.rank()) == from) *ranks.Add() = rank;
    }
    const auto part = parts.find(bit);
    Add(from, entry->key.first, entry->key.second, ranks, bit,
        part != parts.end() ? part->second : nullptr, sets, now);
  }
  DecideReady(sets);
}

void GlobalTable::Add(int from, int32_t set_id, const std::string& name,
                      const google::protobuf::RepeatedPtrField<v1::RankRequest>& ranks,
                      std::optional<uint32_t> cache_bit, const std::string* part,
                      const job::ProcessSetTable& sets, Clock::time_point now, bool replayed) {
  const Key key(set_id, name);
  const auto pending = table_.find(key);
  const auto ahead = ahead_.find(key);
  const bool behind_own =
      !replayed && ahead != ahead_.end() &&
      std::any_of(ahead->second.begin(), ahead->second.end(),
                  [from](const Ahead& waiting) { return waiting.from == from; });
  if ((pending != table_.end() && pending->second.from_nodes.contains(from)) || behind_own) {
    // The node is a step ahead: this waits for the pending step's decision.
    ahead_[key].push_back(Ahead{.from = from,
                                .ranks = ranks,
                                .cache_bit = cache_bit,
                                .part = part != nullptr ? std::optional(*part) : std::nullopt,
                                .at = now});
    return;
  }
  const job::ProcessSet* set = sets.Find(set_id);
  auto [it, inserted] = table_.try_emplace(key);
  Entry& entry = it->second;
  if (inserted) {
    entry.by_set_rank.resize(set != nullptr ? static_cast<size_t>(set->size()) : 0);
    entry.first_at = now;
    entry.sequence = next_sequence_++;
  }
  for (const v1::RankRequest& rank : ranks) {
    const auto index = static_cast<size_t>(rank.set_rank());
    if (index >= entry.by_set_rank.size() || entry.by_set_rank[index].has_value()) {
      log::Coord().error("node {} announced '{}' for set rank {} twice or out of range; ignored",
                         from, name, rank.set_rank());
      continue;
    }
    if (entry.collective == v1::COLLECTIVE_UNSPECIFIED) {
      entry.collective = rank.request().collective();
    }
    entry.by_set_rank[index] = rank;
    ++entry.submitted;
  }
  entry.from_nodes.insert(from);
  if (!cache_bit.has_value()) {
    entry.all_from_cache = false;
  } else if (entry.cache_bit.has_value() && *entry.cache_bit != *cache_bit) {
    entry.all_from_cache = false;
  } else {
    entry.cache_bit = cache_bit;
    if (part != nullptr) entry.parts[from] = *part;
  }
  if (set == nullptr) {
    // Removed while pending: decide at once, as a failure.
    Entry taken = std::move(entry);
    table_.erase(it);
    Decide(key, std::move(taken), sets);
    return;
  }
  RefuseIfJoined(key);
}

void GlobalTable::BeginJoin(int32_t set_id, int32_t first_joined) {
  joins_[set_id].first = first_joined;
  v1::Decision& news = *batch_.add_decisions();
  news.set_process_set_id(set_id);
  news.set_join_began(true);
  news.set_first_joined(first_joined);
  std::vector<Key> keys;
  for (const auto& [key, entry] : table_) {
    if (key.first == set_id) keys.push_back(key);
  }
  for (const Key& key : keys) RefuseIfJoined(key);
}

bool GlobalTable::RefuseIfJoined(const Key& key) {
  const auto joins = joins_.find(key.first);
  const auto it = table_.find(key);
  if (joins == joins_.end() || joins->second.first < 0 || it == table_.end() ||
      RunsAfterJoin(it->second.collective)) {
    return false;
  }
  return Fail(
      key.first, key.second,
      RefusedAfterJoin(it->second.collective, key.second, key.first, {joins->second.first}));
}

bool GlobalTable::IsReady(const Key& key, const Entry& entry) const {
  const auto size = static_cast<int32_t>(entry.by_set_rank.size());
  if (entry.submitted == size) return true;
  if (entry.submitted == 0 || entry.collective == v1::COLLECTIVE_JOIN) return false;
  const auto joins = joins_.find(key.first);
  if (joins == joins_.end()) return false;
  for (int32_t rank = 0; rank < size; ++rank) {
    if (!entry.by_set_rank[rank].has_value() && !joins->second.joined[rank]) return false;
  }
  return true;
}

bool GlobalTable::TakeAhead(const job::ProcessSetTable& sets) {
  bool took = false;
  for (auto it = ahead_.begin(); it != ahead_.end();) {
    const Key key = it->first;
    std::deque<Ahead>& waiting = it->second;
    // Each node's announcements in the order they came; another node's may
    // go before them.
    std::set<int> held;
    for (auto next = waiting.begin(); next != waiting.end();) {
      const auto pending = table_.find(key);
      if (held.contains(next->from) ||
          (pending != table_.end() && pending->second.from_nodes.contains(next->from))) {
        held.insert(next->from);
        ++next;
        continue;
      }
      Ahead taken = std::move(*next);
      next = waiting.erase(next);
      Add(taken.from, key.first, key.second, taken.ranks, taken.cache_bit,
          taken.part.has_value() ? &*taken.part : nullptr, sets, taken.at, /*replayed=*/true);
      took = true;
    }
    it = waiting.empty() ? ahead_.erase(it) : std::next(it);
  }
  return took;
}

void GlobalTable::DecideReady(const job::ProcessSetTable& sets) {
  // Every decision may let announcements that came ahead of it in, which
  // may complete more.
  if (!ended_.ok()) {
    FailAll();
    return;
  }
  for (bool took = TakeAhead(sets);; took = TakeAhead(sets)) {
    std::vector<std::pair<uint64_t, Key>> ready;
    for (const auto& [key, entry] : table_) {
      if (IsReady(key, entry)) ready.emplace_back(entry.sequence, key);
    }
    if (ready.empty() && !took) return;
    std::sort(ready.begin(), ready.end());
    for (const auto& [sequence, key] : ready) {
      auto it = table_.find(key);
      Entry entry = std::move(it->second);
      table_.erase(it);
      Decide(key, std::move(entry), sets);
    }
  }
}

void GlobalTable::Decide(const Key& key, Entry entry, const job::ProcessSetTable& sets) {
  const job::ProcessSet* set = sets.Find(key.first);
  v1::Decision& decision = *batch_.add_decisions();
  decision.set_process_set_id(key.first);
  decision.set_name(key.second);
  const bool has_joined = entry.submitted < static_cast<int32_t>(entry.by_set_rank.size());
  const ResponseCache::Entry* cached =
      entry.all_from_cache && entry.cache_bit.has_value() ? cache_.At(*entry.cache_bit) : nullptr;
  if (set != nullptr && cached != nullptr && cached->key == key && !has_joined) {
    // Every node announced the cached tensor: no request travelled, and
    // the cached ones passed the checks when they were cached. The entry
    // may have been retired (evicted) since: every node still holds it,
    // since its bit is reused only once every node has applied the
    // retirement, which each did after announcing by it. Deciding it as
    // announced keeps a node that settled it from the others' parts in
    // step with the rest.
    decision.set_from_cache(true);
    decision.set_cache_bit(*entry.cache_bit);
    Combine(entry, decision);
    if (cache_.BitOf(key) == entry.cache_bit) bits_.Touch(*entry.cache_bit);
    ++counters_.decided_from_cache;
    return;
  }
  ++counters_.decided_in_full;
  for (auto& rank : entry.by_set_rank) {
    if (rank.has_value()) *decision.add_ranks() = std::move(*rank);
  }
  absl::Status status =
      set == nullptr
          ? absl::NotFoundError(absl::StrCat("process set ", key.first, " was removed while '",
                                             key.second, "' was pending"))
          : check_(Everyone(decision, *set, layout_));
  decision.set_code(static_cast<int32_t>(status.code()));
  decision.set_message(std::string(status.message()));
  if (entry.collective == v1::COLLECTIVE_JOIN) {
    auto joins = joins_.find(key.first);
    decision.set_last_joined(joins != joins_.end() ? joins->second.last : 0);
    joins_.erase(key.first);
  }
  const bool cacheable =
      status.ok() && !has_joined && set != nullptr && CarriesData(entry.collective);
  UpdateCache(key, decision, cacheable);
}

void GlobalTable::Combine(const Entry& entry, v1::Decision& decision) {
  // Decided from the cache, none of its ranks joined: every node of its set
  // announced it. A node without a part leaves it to MPI on every node.
  if (combine_ == nullptr || entry.parts.size() != entry.from_nodes.size()) return;
  std::vector<const std::string*> parts;  // in node order
  for (const auto& [node, part] : entry.parts) parts.push_back(&part);
  if (std::optional<std::string> combined = combine_(cache_.At(decision.cache_bit())->ranks, parts);
      combined.has_value()) {
    decision.set_combined(std::move(*combined));
    ++counters_.decided_combined;
  }
}

void GlobalTable::UpdateCache(const Key& key, v1::Decision& decision, bool cacheable) {
  if (!cache_.enabled()) return;
  const std::optional<uint32_t> live = cache_.BitOf(key);
  if (live.has_value()) {
    const ResponseCache::Entry* entry = cache_.At(*live);
    if (cacheable && SameRequests(decision.ranks(), entry->forms)) {
      bits_.Touch(*live);  // announced in full by a node that joined or lagged
      return;
    }
    // Its parameters changed (or it failed): announce it in full again.
    bits_.Retire(*live, next_batch_);
    decision.add_retire_bits(*live);
  }
  if (!cacheable) return;
  std::vector<uint32_t> evicted;
  const std::optional<uint32_t> bit = bits_.Take(next_batch_, evicted);
  for (uint32_t retired : evicted) decision.add_retire_bits(retired);
  if (!bit.has_value()) return;
  decision.set_cache_put(true);
  decision.set_cache_bit(*bit);
}

bool GlobalTable::Fail(int32_t process_set_id, const std::string& name, const absl::Status& why) {
  auto it = table_.find({process_set_id, name});
  if (it == table_.end()) return false;
  v1::Decision& decision = AddFailure(it->first, why);
  for (auto& rank : it->second.by_set_rank) {
    if (rank.has_value()) *decision.add_ranks() = std::move(*rank);
  }
  table_.erase(it);
  return true;
}

v1::Decision& GlobalTable::AddFailure(const Key& key, const absl::Status& why) {
  v1::Decision& decision = *batch_.add_decisions();
  decision.set_process_set_id(key.first);
  decision.set_name(key.second);
  decision.set_code(static_cast<int32_t>(why.code()));
  decision.set_message(std::string(why.message()));
  return decision;
}

void GlobalTable::EndAll(const absl::Status& why) {
  if (ended_.ok()) ended_ = why;
  FailAll();
}

void GlobalTable::FailAll() {
  while (!table_.empty()) Fail(table_.begin()->first.first, table_.begin()->first.second, ended_);
  // Announcements that waited for a step just failed fail too.
  for (auto& [key, waiting] : ahead_) {
    v1::Decision& decision = AddFailure(key, ended_);
    for (Ahead& next : waiting) {
      for (v1::RankRequest& rank : next.ranks) *decision.add_ranks() = std::move(rank);
    }
  }
  ahead_.clear();
}

std::optional<v1::Decisions> GlobalTable::TakeBatch() {
  if (batch_.decisions().empty()) return std::nullopt;
  ++next_batch_;
  return std::exchange(batch_, {});
}

std::vector<WaitingTensor> GlobalTable::Waiting(const job::ProcessSetTable& sets,
                                                Clock::time_point now) const {
  // Every rank known to have submitted each tensor, and since when.
  std::map<Key, std::pair<std::set<int32_t>, Clock::time_point>> submitted;
  for (const auto& [key, entry] : table_) {
    auto& [ranks, since] = submitted[key];
    since = entry.first_at;
    for (const auto& rank : entry.by_set_rank) {
      if (rank.has_value()) ranks.insert(rank->rank());
    }
  }
  for (const auto& [node, tensors] : partial_) {
    for (const v1::PartialTensor& tensor : tensors) {
      const auto [it, inserted] = submitted.try_emplace({tensor.process_set_id(), tensor.name()});
      auto& [ranks, since] = it->second;
      const Clock::time_point first =
          now - std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(tensor.age_seconds()));
      since = inserted ? first : std::min(since, first);
      ranks.insert(tensor.ranks().begin(), tensor.ranks().end());
    }
  }
  std::vector<WaitingTensor> waiting;
  for (const auto& [key, known] : submitted) {
    const job::ProcessSet* set = sets.Find(key.first);
    if (set == nullptr) continue;
    const auto entry = table_.find(key);
    const v1::Collective collective =
        entry != table_.end() ? entry->second.collective : v1::COLLECTIVE_UNSPECIFIED;
    const auto joins = joins_.find(key.first);
    WaitingTensor tensor{.process_set_id = key.first,
                         .name = key.second,
                         .collective = collective,
                         .first_at = known.second,
                         .across_nodes = true};
    for (size_t rank = 0; rank < set->ranks.size(); ++rank) {
      const int32_t global = set->ranks[rank];
      if (known.first.contains(global)) {
        tensor.ready_ranks.push_back(global);
      } else if (joins == joins_.end() || !joins->second.joined[rank] ||
                 collective == v1::COLLECTIVE_JOIN) {
        tensor.missing_ranks.push_back(global);
      }
    }
    waiting.push_back(std::move(tensor));
  }
  SortOldestFirst(waiting);
  return waiting;
}

}  // namespace collective::daemon::negotiation
