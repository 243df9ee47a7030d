// The response cache of negotiation across nodes, after Horovod's: in steady
// state a training step submits the same tensors with the same parameters,
// so once a tensor has been negotiated in full, every node remembers it
// under a bit, and later a node announces it by setting that bit instead of
// sending every rank's request. Node 0 runs a cached tensor, without
// checking it again, once its bit is set on every node of its set.
//
// Every node holds the same entries at the same bits, because only node 0
// changes them and every node applies its changes in the order of the
// decision batches that carry them. A bit that node 0 frees is reused only
// after every node has applied the batch that freed it, so a bit a node
// sets always means what node 0 thinks it means.
//
// ResponseCache is every node's copy; CacheBits is node 0's bookkeeping of
// which bits it may hand out. Engine thread only; no MPI here.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collective/v1/negotiation.pb.h"
#include "daemon/negotiation/coordinator.h"

namespace collective::daemon::negotiation {

// What a request's cached form keeps: everything the ranks must agree on,
// nothing that changes from step to step (request ids, arena offsets,
// group ids: a grouped request's form has group id 1).
v1::TensorRequest CacheForm(const v1::TensorRequest& request);
// A request's cache form as bytes (deterministic serialisation): two
// requests agree when these are equal. Comparing them costs a fraction of
// what a field-by-field comparison through reflection does, which a cached
// step would otherwise pay for every local rank.
std::string CacheFormBytes(const v1::TensorRequest& request);

class ResponseCache {
 public:
  using Key = std::pair<int32_t, std::string>;  // process set, name

  struct Entry {
    Key key;
    // Every rank's request in cache form, by set rank.
    std::vector<v1::RankRequest> ranks;
    // The same requests as CacheFormBytes, by set rank: what Match compares.
    std::vector<std::string> forms;
    bool retired = false;  // announced by bit no more; kept until node 0 reuses the bit
  };

  explicit ResponseCache(uint32_t capacity) : capacity_(capacity) {}

  uint32_t capacity() const { return capacity_; }
  bool enabled() const { return capacity_ > 0; }

  // Applies node 0's changes, in batch order.
  void Retire(uint32_t bit);
  void Put(uint32_t bit, Key key, std::vector<v1::RankRequest> ranks);
  // Both, for every decision of a batch.
  void Apply(const v1::Decisions& batch);

  // The live entry of a key, and its bit.
  std::optional<uint32_t> BitOf(const Key& key) const;
  // The entry at a bit, live or retired; null if none was ever put there.
  const Entry* At(uint32_t bit) const;

  // The bit under which `tensor` (ready on this node, every local member of
  // its set having submitted it) may be announced: its key is cached and
  // each local submission equals the cached request of its rank.
  std::optional<uint32_t> Match(const ReadyTensor& tensor) const;

  size_t live_entries() const { return by_key_.size(); }
  // How many changes (puts, retirements) were applied: two nodes whose
  // versions are equal hold the same entries at the same bits.
  uint64_t version() const { return version_; }

 private:
  uint32_t capacity_;
  uint64_t version_ = 0;
  std::map<uint32_t, Entry> by_bit_;
  std::map<Key, uint32_t> by_key_;  // live entries only
};

// Node 0: which bits are live (in LRU order), which wait for every node to
// apply the batch that retired them, which may be handed out.
class CacheBits {
 public:
  CacheBits(uint32_t capacity, int nodes);

  // A bit for a new entry, put in batch `batch` (the batch being built);
  // nullopt when none is free yet — the tensor then simply is not cached.
  // When every bit is taken, the least recently used live one is retired
  // (returned in `retired`), to be free once every node has applied this
  // batch.
  std::optional<uint32_t> Take(uint64_t batch, std::vector<uint32_t>& retired);
  // A live bit used again (least recently used goes first).
  void Touch(uint32_t bit);
  // A live bit whose tensor's parameters changed, retired in batch `batch`.
  void Retire(uint32_t bit, uint64_t batch);
  // A node has applied `batches` batches.
  void Acknowledge(int node, uint64_t batches);

 private:
  void Reclaim();

  uint32_t capacity_;
  uint32_t next_unused_ = 0;
  std::list<uint32_t> lru_;  // live bits, least recently used first
  std::map<uint32_t, std::list<uint32_t>::iterator> live_;
  std::vector<std::pair<uint64_t, uint32_t>> retiring_;  // (batch, bit)
  std::vector<uint32_t> free_;
  std::vector<uint64_t> applied_;  // by node
};

// Bit vectors as NodeReady carries them.
std::string PackBits(const std::vector<uint32_t>& bits);
std::vector<uint32_t> UnpackBits(const std::string& packed);

}  // namespace collective::daemon::negotiation
