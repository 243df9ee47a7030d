// The two views of a client segment's submission ring: the client writes
// serialized ClientMessages, the daemon reads them. Single producer, single
// consumer; records never wrap (see SubmitRecordHeader).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "shm/segment_layout.h"

namespace collective::shm {

// Client side. Not thread-safe: the client library serializes pushes.
class SubmissionWriter {
 public:
  // `doorbell`: the job's doorbell word (DoorbellSegment::word()), rung when
  // the engine sleeps on it.
  SubmissionWriter(ClientSegmentHeader* header, std::byte* ring, uint64_t bytes,
                   std::atomic<uint32_t>* doorbell);

  // The largest payload one record can carry.
  static constexpr size_t kMaxPayloadBytes = kMaxSubmitRecordBytes - sizeof(SubmitRecordHeader);

  // Appends one record and makes it visible. False when the daemon has not
  // yet consumed enough of the ring to make room (or `size` exceeds
  // kMaxPayloadBytes, which the caller prevents).
  bool TryPush(const void* payload, size_t size);

  // Tells the daemon's engine there is something to read, waking it if it
  // sleeps. Call after one or more pushes.
  void Ring();

 private:
  ClientSegmentHeader* header_;
  std::byte* ring_;
  uint64_t bytes_;
  uint64_t head_;
  std::atomic<uint32_t>* doorbell_;
};

// Daemon side. Keeps its own tail and never trusts the client's numbers:
// everything it reads is copied out of shared memory before it is checked.
class SubmissionReader {
 public:
  SubmissionReader(ClientSegmentHeader* header, const std::byte* ring, uint64_t bytes);

  // Copies the next message's payload into `payload`: true if there was one,
  // false if the ring is empty, an error if the client published something
  // impossible (then the ring must not be read again).
  absl::StatusOr<bool> Next(std::string* payload);

  bool Empty() const;

 private:
  ClientSegmentHeader* header_;
  const std::byte* ring_;
  uint64_t bytes_;
  uint64_t tail_;
};

}  // namespace collective::shm
