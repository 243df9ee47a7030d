#include "shm/result_segment.h"

#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace collective::shm {

absl::StatusOr<std::unique_ptr<ResultSegment>> ResultSegment::Create(const CreateOptions& options) {
  ASSIGN_OR_RETURN(auto mapping, MappedSegment::Create({.name = options.name,
                                                        .bytes = SegmentBytes(options.data_bytes),
                                                        .owner_uid = options.owner_uid,
                                                        .owner_gid = options.owner_gid,
                                                        .mode = options.mode}));
  auto* header = new (mapping->data()) ResultSegmentHeader{};
  header->layout_version = kLayoutVersion;
  header->epoch = options.epoch;
  header->job_sequence = options.job_sequence;
  header->data_offset = kPageBytes;
  header->data_bytes = mapping->size() - kPageBytes;
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kResultSegmentMagic;
  return std::unique_ptr<ResultSegment>(new ResultSegment(std::move(mapping)));
}

absl::StatusOr<std::unique_ptr<ResultSegment>> ResultSegment::OpenReadOnly(const std::string& name,
                                                                           uint64_t segment_bytes,
                                                                           uint64_t epoch) {
  if (segment_bytes < kPageBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("result segment '/", name, "' is too small to hold its header"));
  }
  ASSIGN_OR_RETURN(auto mapping, MappedSegment::Open(name, segment_bytes, /*writable=*/false));
  const auto* header = reinterpret_cast<const ResultSegmentHeader*>(mapping->data());
  if (header->magic != kResultSegmentMagic || header->layout_version != kLayoutVersion ||
      header->epoch != epoch || header->data_offset != kPageBytes ||
      header->data_bytes != segment_bytes - kPageBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("result segment '/", name, "' does not match this daemon instance"));
  }
  return std::unique_ptr<ResultSegment>(new ResultSegment(std::move(mapping)));
}

}  // namespace collective::shm
