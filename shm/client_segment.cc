#include "shm/client_segment.h"

#include <bit>
#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace collective::shm {

ClientSegment::ClientSegment(std::unique_ptr<MappedSegment> mapping)
    : mapping_(std::move(mapping)) {}

absl::StatusOr<std::unique_ptr<ClientSegment>> ClientSegment::Create(const CreateOptions& options) {
  const uint32_t capacity = std::bit_ceil(std::max<uint32_t>(options.ring_capacity, 1));
  const uint64_t submit_bytes =
      std::bit_ceil(std::max<uint64_t>(options.submit_bytes, kMinSubmitRingBytes));
  const uint64_t text_bytes =
      std::bit_ceil(std::max<uint64_t>(options.text_bytes, kMinTextRingBytes));
  const ClientSegmentGeometry geometry =
      ComputeClientSegmentGeometry(capacity, text_bytes, submit_bytes, options.arena_bytes);
  ASSIGN_OR_RETURN(auto mapping, MappedSegment::Create({.name = options.name,
                                                        .bytes = geometry.segment_bytes,
                                                        .owner_uid = options.owner_uid,
                                                        .owner_gid = options.owner_gid,
                                                        .mode = 0600}));
  // The pages are fresh (zero); construct the header in place.
  auto* header = new (mapping->data()) ClientSegmentHeader{};
  header->layout_version = kLayoutVersion;
  header->ring_capacity = capacity;
  header->epoch = options.epoch;
  header->client_id = options.client_id;
  header->client_pid = options.client_pid;
  header->segment_bytes = geometry.segment_bytes;
  header->ring_offset = geometry.ring_offset;
  header->arena_offset = geometry.arena_offset;
  header->arena_bytes = geometry.arena_bytes;
  header->submit_offset = geometry.submit_offset;
  header->submit_bytes = geometry.submit_bytes;
  header->text_offset = geometry.text_offset;
  header->text_bytes = geometry.text_bytes;
  // The magic goes last: a reader that sees it sees a complete header.
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kClientSegmentMagic;

  auto segment = std::unique_ptr<ClientSegment>(new ClientSegment(std::move(mapping)));
  segment->ring_offset_ = geometry.ring_offset;
  segment->ring_capacity_ = capacity;
  segment->text_offset_ = geometry.text_offset;
  segment->text_bytes_ = geometry.text_bytes;
  segment->arena_offset_ = geometry.arena_offset;
  segment->arena_bytes_ = geometry.arena_bytes;
  segment->submit_offset_ = geometry.submit_offset;
  segment->submit_bytes_ = geometry.submit_bytes;
  return segment;
}

absl::StatusOr<std::unique_ptr<ClientSegment>> ClientSegment::Open(const std::string& name,
                                                                   uint64_t segment_bytes,
                                                                   uint64_t epoch,
                                                                   uint64_t client_id) {
  if (segment_bytes < kPageBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment '/", name, "' is too small to hold its header"));
  }
  ASSIGN_OR_RETURN(auto mapping, MappedSegment::Open(name, segment_bytes, /*writable=*/true));
  const auto* header = reinterpret_cast<const ClientSegmentHeader*>(mapping->data());
  if (header->magic != kClientSegmentMagic || header->layout_version != kLayoutVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "segment '/", name, "' has layout version ", header->layout_version, " (magic ",
        absl::Hex(header->magic), "); this client speaks version ", kLayoutVersion));
  }
  if (header->epoch != epoch || header->client_id != client_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment '/", name, "' belongs to another daemon instance or client"));
  }
  const ClientSegmentGeometry expected = ComputeClientSegmentGeometry(
      header->ring_capacity, header->text_bytes, header->submit_bytes, header->arena_bytes);
  if (!std::has_single_bit(header->ring_capacity) || !std::has_single_bit(header->submit_bytes) ||
      !std::has_single_bit(header->text_bytes) || header->text_bytes < kMinTextRingBytes ||
      header->submit_bytes < kMinSubmitRingBytes || header->segment_bytes != segment_bytes ||
      expected.segment_bytes != segment_bytes || expected.ring_offset != header->ring_offset ||
      expected.text_offset != header->text_offset ||
      expected.submit_offset != header->submit_offset ||
      expected.arena_offset != header->arena_offset) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment '/", name, "' has an inconsistent header"));
  }
  auto segment = std::unique_ptr<ClientSegment>(new ClientSegment(std::move(mapping)));
  segment->ring_offset_ = expected.ring_offset;
  segment->ring_capacity_ = header->ring_capacity;
  segment->text_offset_ = expected.text_offset;
  segment->text_bytes_ = expected.text_bytes;
  segment->arena_offset_ = expected.arena_offset;
  segment->arena_bytes_ = expected.arena_bytes;
  segment->submit_offset_ = expected.submit_offset;
  segment->submit_bytes_ = expected.submit_bytes;
  return segment;
}

}  // namespace collective::shm
