// The job's result segment and the daemon's private bookkeeping of it: which
// blocks hold results, and how many readers each block still has. A block
// returns to the free space when its last reader released it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "daemon/job/sigbus_guard.h"
#include "shm/arena_allocator.h"
#include "shm/result_segment.h"

namespace collective::daemon::job {

class ResultArena {
 public:
  static absl::StatusOr<std::unique_ptr<ResultArena>> Create(
      const shm::ResultSegment::CreateOptions& options);

  // A block of `bytes` with `readers` (at least 1) references, or nullopt when
  // the free space is currently too fragmented or too small.
  std::optional<uint64_t> Allocate(uint64_t bytes, uint32_t readers);
  // Drops one reference to the block at `block`; frees it at zero.
  void Release(uint64_t block);
  // Frees the block whatever its references (its result was never handed out).
  void Discard(uint64_t block);

  std::byte* data() const { return segment_->mutable_data(); }
  uint64_t capacity() const { return allocator_.capacity(); }
  uint64_t bytes_in_use() const { return allocator_.bytes_in_use(); }
  const shm::ResultSegment& segment() const { return *segment_; }
  // Whether the segment vanished under a write (its owner may truncate it;
  // see SigbusGuard). Results written since are lost.
  bool faulted() const { return guard_.faulted(); }

 private:
  explicit ResultArena(std::unique_ptr<shm::ResultSegment> segment);

  std::unique_ptr<shm::ResultSegment> segment_;
  GuardedRange guard_;
  shm::ArenaAllocator allocator_;
  absl::flat_hash_map<uint64_t, uint32_t> readers_;  // block -> references left
};

}  // namespace collective::daemon::job
