// A client's own segment: header, completion ring, text ring, submission
// ring and data arena (layout in segment_layout.h). The daemon creates and initialises it; the
// client opens it and checks that it is what the daemon said it would be.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "shm/mapped_segment.h"
#include "shm/segment_layout.h"

namespace collective::shm {

class ClientSegment {
 public:
  struct CreateOptions {
    std::string name;
    uint64_t arena_bytes = 0;
    uint32_t ring_capacity = 0;  // rounded up to a power of two
    uint64_t text_bytes = 0;     // rounded up to a power of two, at least kMinTextRingBytes
    uint64_t submit_bytes = 0;   // rounded up to a power of two, at least kMinSubmitRingBytes
    uint64_t epoch = 0;
    uint64_t client_id = 0;
    int64_t client_pid = 0;
    uid_t owner_uid = 0;
    gid_t owner_gid = 0;
  };

  // Daemon side.
  static absl::StatusOr<std::unique_ptr<ClientSegment>> Create(const CreateOptions& options);

  // Client side: maps the segment read-write and checks magic, layout
  // version, epoch, client id and geometry.
  static absl::StatusOr<std::unique_ptr<ClientSegment>> Open(const std::string& name,
                                                             uint64_t segment_bytes, uint64_t epoch,
                                                             uint64_t client_id);

  ClientSegmentHeader* header() const { return reinterpret_cast<ClientSegmentHeader*>(base()); }
  CompletionRecord* ring() const {
    return reinterpret_cast<CompletionRecord*>(base() + ring_offset_);
  }
  uint32_t ring_capacity() const { return ring_capacity_; }
  std::byte* text_ring() const { return base() + text_offset_; }
  uint64_t text_bytes() const { return text_bytes_; }
  std::byte* submit_ring() const { return base() + submit_offset_; }
  uint64_t submit_bytes() const { return submit_bytes_; }
  std::byte* arena() const { return base() + arena_offset_; }
  uint64_t arena_bytes() const { return arena_bytes_; }
  uint64_t size() const { return mapping_->size(); }
  const std::string& name() const { return mapping_->name(); }

  // Removes the name; the mappings stay valid until this object dies.
  void Unlink() { mapping_->Unlink(); }

 private:
  explicit ClientSegment(std::unique_ptr<MappedSegment> mapping);
  std::byte* base() const { return mapping_->data(); }

  std::unique_ptr<MappedSegment> mapping_;
  // Private copies: the header is client-writable memory, so the daemon never
  // re-reads geometry from it after creation.
  uint64_t ring_offset_ = 0;
  uint64_t text_offset_ = 0;
  uint64_t text_bytes_ = 0;
  uint64_t arena_offset_ = 0;
  uint64_t arena_bytes_ = 0;
  uint64_t submit_offset_ = 0;
  uint64_t submit_bytes_ = 0;
  uint32_t ring_capacity_ = 0;
};

}  // namespace collective::shm
