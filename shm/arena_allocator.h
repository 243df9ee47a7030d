// Best-fit allocator of byte ranges inside an arena, by offset. Its
// bookkeeping lives in the owner's private memory, never in the shared
// segment: the client library uses it for its own arena, the daemon for the
// result segment. Not thread-safe; owners lock around it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace collective::shm {

class ArenaAllocator {
 public:
  ArenaAllocator(uint64_t capacity, uint64_t alignment);

  // The offset of a block of at least `bytes` (rounded up to the alignment),
  // or nullopt if no free range is large enough. Zero bytes still returns a
  // distinct block of one alignment unit, so every block can be freed.
  std::optional<uint64_t> Allocate(uint64_t bytes);

  // Returns the block that starts at `offset`. False if no block starts there
  // (a double free or a foreign offset); nothing changes then.
  bool Free(uint64_t offset);

  // Bytes of the block that starts at `offset`, or 0.
  uint64_t BlockBytes(uint64_t offset) const;

  uint64_t capacity() const { return capacity_; }
  uint64_t bytes_in_use() const { return in_use_; }
  uint64_t largest_free_block() const;
  size_t blocks_in_use() const { return used_.size(); }

 private:
  void InsertFree(uint64_t offset, uint64_t bytes);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t capacity_;
  uint64_t alignment_;
  uint64_t in_use_ = 0;
  std::map<uint64_t, uint64_t> free_by_offset_;           // offset -> bytes
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (bytes, offset)
  std::map<uint64_t, uint64_t> used_;                     // offset -> bytes
};

}  // namespace collective::shm
