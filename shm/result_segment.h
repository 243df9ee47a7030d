// A job's result segment: the daemon writes collective results here (the
// fused buffers of the local reduction); the job's clients map it read-only
// and read or copy their results out of it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "shm/mapped_segment.h"
#include "shm/segment_layout.h"

namespace collective::shm {

class ResultSegment {
 public:
  struct CreateOptions {
    std::string name;
    uint64_t data_bytes = 0;
    uint64_t epoch = 0;
    uint64_t job_sequence = 0;
    uid_t owner_uid = 0;
    gid_t owner_gid = 0;
    mode_t mode = 0400;  // the daemon keeps its own read-write mapping
  };

  // Daemon side: read-write.
  static absl::StatusOr<std::unique_ptr<ResultSegment>> Create(const CreateOptions& options);
  // Client side: read-only; checks magic, layout version and epoch.
  static absl::StatusOr<std::unique_ptr<ResultSegment>> OpenReadOnly(const std::string& name,
                                                                     uint64_t segment_bytes,
                                                                     uint64_t epoch);

  static uint64_t SegmentBytes(uint64_t data_bytes) {
    return kPageBytes + RoundUp(data_bytes, kPageBytes);
  }

  const std::byte* data() const { return mapping_->data() + kPageBytes; }
  // Daemon side only (the client's mapping is read-only).
  std::byte* mutable_data() const { return mapping_->data() + kPageBytes; }
  uint64_t data_bytes() const { return mapping_->size() - kPageBytes; }
  uint64_t size() const { return mapping_->size(); }
  const std::string& name() const { return mapping_->name(); }

 private:
  explicit ResultSegment(std::unique_ptr<MappedSegment> mapping) : mapping_(std::move(mapping)) {}

  std::unique_ptr<MappedSegment> mapping_;
};

}  // namespace collective::shm
