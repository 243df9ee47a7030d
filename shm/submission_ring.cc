#include "shm/submission_ring.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "shm/futex.h"

namespace collective::shm {

SubmissionWriter::SubmissionWriter(ClientSegmentHeader* header, std::byte* ring, uint64_t bytes,
                                   std::atomic<uint32_t>* doorbell)
    : header_(header),
      ring_(ring),
      bytes_(bytes),
      head_(header->submit_head.load(std::memory_order_relaxed)),
      doorbell_(doorbell) {}

bool SubmissionWriter::TryPush(const void* payload, size_t size) {
  if (size > kMaxPayloadBytes) return false;
  const uint64_t record = sizeof(SubmitRecordHeader) + RoundUp(size, kSubmitAlignment);
  const uint64_t used = head_ - header_->submit_tail.load(std::memory_order_acquire);
  const uint64_t position = head_ & (bytes_ - 1);
  const uint64_t to_end = bytes_ - position;
  const uint64_t needed = record <= to_end ? record : to_end + record;
  if (used > bytes_ || needed > bytes_ - used) return false;
  if (record > to_end) {
    const SubmitRecordHeader pad{static_cast<uint32_t>(to_end - sizeof(SubmitRecordHeader)),
                                 kSubmitPad};
    std::memcpy(ring_ + position, &pad, sizeof(pad));
    head_ += to_end;
  }
  std::byte* slot = ring_ + (head_ & (bytes_ - 1));
  const SubmitRecordHeader header{static_cast<uint32_t>(size), kSubmitMessage};
  std::memcpy(slot, &header, sizeof(header));
  std::memcpy(slot + sizeof(header), payload, size);
  head_ += record;
  header_->submit_head.store(head_, std::memory_order_release);
  return true;
}

void SubmissionWriter::Ring() {
  // Dekker pair with the engine, which raises daemon_sleeping before it
  // re-checks submit_word against the value it read before looking for work:
  // either it sees this bump (and does not sleep), or this sees it sleeping
  // and wakes the word it sleeps on. A wake that comes before the engine's
  // wait finds the word changed, so the wait returns at once.
  header_->submit_word.fetch_add(1, std::memory_order_seq_cst);
  switch (header_->daemon_sleeping.load(std::memory_order_seq_cst)) {
    case kDaemonSleepsOnSubmitWord:
      FutexWakeAll(&header_->submit_word);
      break;
    case kDaemonSleepsOnDoorbell:
      doorbell_->fetch_add(1, std::memory_order_seq_cst);
      FutexWakeAll(doorbell_);
      break;
    default:
      break;
  }
}

SubmissionReader::SubmissionReader(ClientSegmentHeader* header, const std::byte* ring,
                                   uint64_t bytes)
    : header_(header),
      ring_(ring),
      bytes_(bytes),
      tail_(header->submit_tail.load(std::memory_order_relaxed)) {}

bool SubmissionReader::Empty() const {
  return header_->submit_head.load(std::memory_order_acquire) == tail_;
}

absl::StatusOr<bool> SubmissionReader::Next(std::string* payload) {
  while (true) {
    const uint64_t head = header_->submit_head.load(std::memory_order_acquire);
    if (head == tail_) return false;
    const uint64_t available = head - tail_;
    const uint64_t position = tail_ & (bytes_ - 1);
    const uint64_t to_end = bytes_ - position;
    if (available > bytes_ || available < sizeof(SubmitRecordHeader)) {
      return absl::DataLossError(absl::StrCat("the submission ring claims ", available,
                                              " unread bytes in a ring of ", bytes_));
    }
    SubmitRecordHeader header;
    std::memcpy(&header, ring_ + position, sizeof(header));
    if (header.kind == kSubmitPad) {
      if (header.bytes != to_end - sizeof(header) || available < to_end) {
        return absl::DataLossError("a padding record of the submission ring has a bad length");
      }
      tail_ += to_end;
      header_->submit_tail.store(tail_, std::memory_order_release);
      continue;
    }
    const uint64_t record = sizeof(header) + RoundUp(header.bytes, kSubmitAlignment);
    if (header.kind != kSubmitMessage || header.bytes > SubmissionWriter::kMaxPayloadBytes ||
        record > to_end || record > available) {
      return absl::DataLossError(absl::StrCat("a record of the submission ring is malformed (kind ",
                                              header.kind, ", ", header.bytes, " bytes)"));
    }
    payload->assign(reinterpret_cast<const char*>(ring_ + position + sizeof(header)), header.bytes);
    // Only now may the client reuse the space.
    tail_ += record;
    header_->submit_tail.store(tail_, std::memory_order_release);
    return true;
  }
}

}  // namespace collective::shm
