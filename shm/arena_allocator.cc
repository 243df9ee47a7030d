#include "shm/arena_allocator.h"

#include <iterator>

#include "shm/segment_layout.h"

namespace collective::shm {

ArenaAllocator::ArenaAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity / alignment * alignment), alignment_(alignment) {
  if (capacity_ > 0) InsertFree(0, capacity_);
}

std::optional<uint64_t> ArenaAllocator::Allocate(uint64_t bytes) {
  if (bytes > capacity_) return std::nullopt;
  const uint64_t size = bytes == 0 ? alignment_ : RoundUp(bytes, alignment_);
  auto fit = free_by_size_.lower_bound({size, 0});
  if (fit == free_by_size_.end()) return std::nullopt;
  const auto [free_bytes, offset] = *fit;
  EraseFree(free_by_offset_.find(offset));
  if (free_bytes > size) InsertFree(offset + size, free_bytes - size);
  used_.emplace(offset, size);
  in_use_ += size;
  return offset;
}

bool ArenaAllocator::Free(uint64_t offset) {
  auto used = used_.find(offset);
  if (used == used_.end()) return false;
  uint64_t start = offset;
  uint64_t size = used->second;
  in_use_ -= size;
  used_.erase(used);
  // Coalesce with the free neighbours on both sides.
  auto next = free_by_offset_.lower_bound(start);
  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    next = std::next(next);
    EraseFree(std::prev(next));
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(start, size);
  return true;
}

uint64_t ArenaAllocator::BlockBytes(uint64_t offset) const {
  auto it = used_.find(offset);
  return it == used_.end() ? 0 : it->second;
}

uint64_t ArenaAllocator::largest_free_block() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

void ArenaAllocator::InsertFree(uint64_t offset, uint64_t bytes) {
  free_by_offset_.emplace(offset, bytes);
  free_by_size_.emplace(bytes, offset);
}

void ArenaAllocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

}  // namespace collective::shm
