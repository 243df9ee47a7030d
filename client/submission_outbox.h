// What libcollective sends collectived through the submission ring of its
// segment: messages, each pushed whole and in order, and the releases of
// results (with their copy-out spans) that ride along with the next message,
// or go on their own once enough of them queued. Every queued release is
// published exactly once: a push takes the queued releases out of the queue
// as it builds its record, so a release queued while that push waits for
// room goes with a later one, and a push that fails puts them back.
//
// Not thread-safe on its own: every call is made under the client core's
// mutex, passed in as `lock`, which a push lets go of while it waits for
// room (so that other threads can reap completions, and queue releases).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collective/v1/collective.pb.h"
#include "shm/submission_ring.h"

namespace collective::internal {

class SubmissionOutbox {
 public:
  // Waits a while for the daemon to make room in the ring, with `lock` let
  // go of, and takes it again; or says why room will never come (the daemon
  // is gone).
  using WaitForRoom = std::function<absl::Status(std::unique_lock<std::mutex>& lock)>;

  // Queued releases go on their own once this many are queued.
  static constexpr size_t kReleaseBatch = 64;

  // `release_bytes`: queued releases go on their own once they free this
  // many bytes of results (which the daemon may be waiting for).
  SubmissionOutbox(shm::SubmissionWriter writer, uint64_t release_bytes, WaitForRoom wait);

  // Adds the queued releases to `message` and pushes it, waiting while the
  // ring is full, then wakes the daemon.
  absl::Status Push(v1::ClientMessage& message, std::unique_lock<std::mutex>& lock);

  // Queues the release of `request_id`'s result of `bytes` bytes (and when
  // it was copied out); pushes the queue on its own once it is big enough.
  absl::Status Release(uint64_t request_id, uint64_t bytes, std::optional<v1::CopyOutSpan> copy_out,
                       std::unique_lock<std::mutex>& lock);

 private:
  // Pushes one record, waiting while the ring is full, and wakes the daemon.
  absl::Status PushRecord(const std::string& payload, std::unique_lock<std::mutex>& lock);

  shm::SubmissionWriter writer_;
  const uint64_t release_bytes_limit_;
  const WaitForRoom wait_;
  std::vector<uint64_t> releases_;
  std::vector<v1::CopyOutSpan> copy_outs_;
  uint64_t release_bytes_ = 0;
};

}  // namespace collective::internal
