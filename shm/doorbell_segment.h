// A job's doorbell segment: one page holding the futex word the engine sleeps
// on when it cannot wait on every client's own submit_word (see
// segment_layout.h and daemon/engine/engine_doorbell.h). The daemon creates
// it with the job's result segment; every client of the job maps it
// read-write and rings it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "shm/mapped_segment.h"
#include "shm/segment_layout.h"

namespace collective::shm {

class DoorbellSegment {
 public:
  struct CreateOptions {
    std::string name;
    uint64_t epoch = 0;
    uint64_t job_sequence = 0;
    uid_t owner_uid = 0;
    gid_t owner_gid = 0;
    mode_t mode = 0600;
  };

  static constexpr uint64_t kSegmentBytes = kPageBytes;

  // Daemon side.
  static absl::StatusOr<std::unique_ptr<DoorbellSegment>> Create(const CreateOptions& options);
  // Client side: read-write; checks size, magic, layout version and epoch.
  static absl::StatusOr<std::unique_ptr<DoorbellSegment>> Open(const std::string& name,
                                                               uint64_t segment_bytes,
                                                               uint64_t epoch);

  std::atomic<uint32_t>* word() const { return &header()->word; }
  void* data() const { return mapping_->data(); }
  uint64_t size() const { return mapping_->size(); }
  const std::string& name() const { return mapping_->name(); }
  // Removes the name now (no client may open it any more); the mappings
  // stay valid.
  void Unlink() { mapping_->Unlink(); }

 private:
  explicit DoorbellSegment(std::unique_ptr<MappedSegment> mapping) : mapping_(std::move(mapping)) {}
  DoorbellSegmentHeader* header() const {
    return reinterpret_cast<DoorbellSegmentHeader*>(mapping_->data());
  }

  std::unique_ptr<MappedSegment> mapping_;
};

}  // namespace collective::shm
