#include "client/submission_outbox.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace collective::internal {

SubmissionOutbox::SubmissionOutbox(shm::SubmissionWriter writer, uint64_t release_bytes,
                                   WaitForRoom wait)
    : writer_(writer), release_bytes_limit_(release_bytes), wait_(std::move(wait)) {}

absl::Status SubmissionOutbox::Push(v1::ClientMessage& message,
                                    std::unique_lock<std::mutex>& lock) {
  // Taken out of the queue now: what is queued while this push waits for
  // room is not in this record, so it must stay for a later one.
  std::vector<uint64_t> releases = std::exchange(releases_, {});
  std::vector<v1::CopyOutSpan> copy_outs = std::exchange(copy_outs_, {});
  const uint64_t release_bytes = std::exchange(release_bytes_, 0);
  for (uint64_t released : releases) message.add_released(released);
  for (const v1::CopyOutSpan& span : copy_outs) *message.add_copy_outs() = span;
  absl::Status pushed = PushRecord(message.SerializeAsString(), lock);
  if (!pushed.ok()) {
    releases_.insert(releases_.end(), releases.begin(), releases.end());
    copy_outs_.insert(copy_outs_.end(), copy_outs.begin(), copy_outs.end());
    release_bytes_ += release_bytes;
  }
  return pushed;
}

absl::Status SubmissionOutbox::PushRecord(const std::string& payload,
                                          std::unique_lock<std::mutex>& lock) {
  if (payload.size() > shm::SubmissionWriter::kMaxPayloadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a submission of ", payload.size(), " bytes exceeds the ring's record limit"));
  }
  while (!writer_.TryPush(payload.data(), payload.size())) {
    // The ring is full until the engine reads it; it is awake now.
    writer_.Ring();
    RETURN_IF_ERROR(wait_(lock));
  }
  writer_.Ring();
  return absl::OkStatus();
}

absl::Status SubmissionOutbox::Release(uint64_t request_id, uint64_t bytes,
                                       std::optional<v1::CopyOutSpan> copy_out,
                                       std::unique_lock<std::mutex>& lock) {
  releases_.push_back(request_id);
  release_bytes_ += bytes;
  if (copy_out.has_value()) copy_outs_.push_back(std::move(*copy_out));
  if (releases_.size() < kReleaseBatch && release_bytes_ < release_bytes_limit_) {
    return absl::OkStatus();
  }
  v1::ClientMessage message;
  return Push(message, lock);
}

}  // namespace collective::internal
