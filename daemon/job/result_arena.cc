#include "daemon/job/result_arena.h"

#include <utility>

#include "common/logging.h"
#include "common/status_macros.h"

namespace collective::daemon::job {

ResultArena::ResultArena(std::unique_ptr<shm::ResultSegment> segment)
    : segment_(std::move(segment)),
      guard_(segment_->mutable_data(), segment_->data_bytes()),
      allocator_(segment_->data_bytes(), shm::kDataAlignment) {}

absl::StatusOr<std::unique_ptr<ResultArena>> ResultArena::Create(
    const shm::ResultSegment::CreateOptions& options) {
  ASSIGN_OR_RETURN(auto segment, shm::ResultSegment::Create(options));
  return std::unique_ptr<ResultArena>(new ResultArena(std::move(segment)));
}

std::optional<uint64_t> ResultArena::Allocate(uint64_t bytes, uint32_t readers) {
  auto block = allocator_.Allocate(bytes);
  if (!block.has_value()) return std::nullopt;
  readers_[*block] = readers;
  return block;
}

void ResultArena::Release(uint64_t block) {
  auto it = readers_.find(block);
  if (it == readers_.end()) {
    log::Exec().error("release of result block {} that has no readers", block);
    return;
  }
  if (--it->second == 0) {
    readers_.erase(it);
    allocator_.Free(block);
  }
}

void ResultArena::Discard(uint64_t block) {
  if (readers_.erase(block) > 0) allocator_.Free(block);
}

}  // namespace collective::daemon::job
