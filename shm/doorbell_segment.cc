#include "shm/doorbell_segment.h"

#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace collective::shm {

absl::StatusOr<std::unique_ptr<DoorbellSegment>> DoorbellSegment::Create(
    const CreateOptions& options) {
  ASSIGN_OR_RETURN(auto mapping, MappedSegment::Create({.name = options.name,
                                                        .bytes = kSegmentBytes,
                                                        .owner_uid = options.owner_uid,
                                                        .owner_gid = options.owner_gid,
                                                        .mode = options.mode}));
  auto* header = new (mapping->data()) DoorbellSegmentHeader{};
  header->layout_version = kLayoutVersion;
  header->epoch = options.epoch;
  header->job_sequence = options.job_sequence;
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kDoorbellSegmentMagic;
  return std::unique_ptr<DoorbellSegment>(new DoorbellSegment(std::move(mapping)));
}

absl::StatusOr<std::unique_ptr<DoorbellSegment>> DoorbellSegment::Open(const std::string& name,
                                                                       uint64_t segment_bytes,
                                                                       uint64_t epoch) {
  if (segment_bytes != kSegmentBytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "doorbell segment '/", name, "' is said to be ", segment_bytes,
        " bytes; this client expects ", kSegmentBytes, " (a daemon of another version?)"));
  }
  ASSIGN_OR_RETURN(auto mapping, MappedSegment::Open(name, segment_bytes, /*writable=*/true));
  const auto* header = reinterpret_cast<const DoorbellSegmentHeader*>(mapping->data());
  if (header->magic != kDoorbellSegmentMagic || header->layout_version != kLayoutVersion ||
      header->epoch != epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat("doorbell segment '/", name, "' does not match this daemon instance"));
  }
  return std::unique_ptr<DoorbellSegment>(new DoorbellSegment(std::move(mapping)));
}

}  // namespace collective::shm
