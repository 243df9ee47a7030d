#include "shm/completion_ring.h"

#include <algorithm>
#include <cstring>

#include "shm/futex.h"

namespace collective::shm {
namespace {

// The longest prefix of `text` of at most `bytes` bytes that does not split
// a UTF-8 character: the client hands the text on as a message (a Python
// str, a proto3 string), which must be valid UTF-8.
absl::string_view Utf8Prefix(absl::string_view text, size_t bytes) {
  if (text.size() <= bytes) return text;
  while (bytes > 0 && (static_cast<unsigned char>(text[bytes]) & 0xc0) == 0x80) --bytes;
  return text.substr(0, bytes);
}

constexpr absl::string_view kCut = "...";

}  // namespace

RingPublisher::RingPublisher(const ClientSegment& segment)
    : header_(segment.header()),
      slots_(segment.ring()),
      mask_(segment.ring_capacity() - 1),
      head_(0),
      texts_(segment.text_ring()),
      text_bytes_(segment.text_bytes()),
      text_head_(0) {}

void RingPublisher::PlaceText(absl::string_view text, CompletionRecord& record) {
  if (text.empty()) return;
  // The client's tail only sizes the room; a lie (a tail ahead of the head,
  // or one far behind) leaves no room, never a write outside the ring.
  const uint64_t used = text_head_ - header_->text_tail.load(std::memory_order_acquire);
  const uint64_t free = used > text_bytes_ ? 0 : text_bytes_ - used;
  const uint64_t position = text_head_ & (text_bytes_ - 1);
  const uint64_t to_end = text_bytes_ - position;
  // A text never wraps: it goes here, or at the start of the ring after
  // skipping the rest.
  const uint64_t here = std::min(free, to_end) & ~(kTextAlignment - 1);
  const uint64_t wrapped = (free > to_end ? free - to_end : 0) & ~(kTextAlignment - 1);
  const uint64_t room = std::min<uint64_t>(std::max(here, wrapped), kMaxRecordTextBytes);
  absl::string_view body = text;
  absl::string_view cut;
  if (text.size() > room) {
    // What fits, marked as cut (when even the mark does not fit, nothing).
    if (room <= kCut.size()) return;
    body = Utf8Prefix(text, room - kCut.size());
    cut = kCut;
  }
  const uint64_t bytes = body.size() + cut.size();
  if (RoundUp(bytes, kTextAlignment) > here) text_head_ += to_end;
  std::byte* slot = texts_ + (text_head_ & (text_bytes_ - 1));
  std::memcpy(slot, body.data(), body.size());
  // An uncut text has no mark, and memcpy from its null data is undefined
  // even for no bytes.
  if (!cut.empty()) std::memcpy(slot + body.size(), cut.data(), cut.size());
  record.text_bytes = static_cast<uint32_t>(bytes);
  record.text_position = text_head_;
  text_head_ += RoundUp(bytes, kTextAlignment);
}

void RingPublisher::Publish(CompletionRecord record, absl::string_view text) {
  record.text_bytes = 0;
  record.text_position = 0;
  PlaceText(text, record);
  slots_[head_ & mask_] = record;
  ++head_;
  // Releases the text with the record: a client that sees the head sees both.
  header_->ring_head.store(head_, std::memory_order_release);
  // Dekker pair with the client's BeginSleep: it raises `sleepers` before it
  // re-reads the wake word; we bump the wake word before we read `sleepers`.
  // One of us sees the other, so a sleeping client is never missed.
  header_->wake_word.fetch_add(1, std::memory_order_seq_cst);
  if (header_->sleepers.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&header_->wake_word);
}

RingConsumer::RingConsumer(const ClientSegment& segment)
    : header_(segment.header()),
      slots_(segment.ring()),
      mask_(segment.ring_capacity() - 1),
      tail_(segment.header()->ring_tail.load(std::memory_order_relaxed)),
      texts_(segment.text_ring()),
      text_bytes_(segment.text_bytes()) {}

std::optional<Completion> RingConsumer::TryPop() {
  if (header_->ring_head.load(std::memory_order_acquire) == tail_) return std::nullopt;
  Completion completion{slots_[tail_ & mask_], {}};
  ++tail_;
  const CompletionRecord& record = completion.record;
  if (record.text_bytes > 0) {
    const uint64_t position = record.text_position & (text_bytes_ - 1);
    if (record.text_bytes <= kMaxRecordTextBytes && record.text_bytes <= text_bytes_ - position) {
      completion.text.assign(reinterpret_cast<const char*>(texts_ + position), record.text_bytes);
      // Copied out: the daemon may reuse the space.
      header_->text_tail.store(record.text_position + RoundUp(record.text_bytes, kTextAlignment),
                               std::memory_order_release);
    }
  }
  header_->ring_tail.store(tail_, std::memory_order_release);
  return completion;
}

bool RingConsumer::Empty() const {
  return header_->ring_head.load(std::memory_order_acquire) ==
         header_->ring_tail.load(std::memory_order_acquire);
}

uint32_t RingConsumer::WakeWord() const {
  return header_->wake_word.load(std::memory_order_seq_cst);
}

void RingConsumer::BeginSleep() { header_->sleepers.fetch_add(1, std::memory_order_seq_cst); }

void RingConsumer::Sleep(uint32_t snapshot, absl::Duration timeout) {
  FutexWait(&header_->wake_word, snapshot, timeout);
}

void RingConsumer::EndSleep() { header_->sleepers.fetch_sub(1, std::memory_order_seq_cst); }

void RingConsumer::WakeLocal() {
  header_->wake_word.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&header_->wake_word);
}

uint64_t RingConsumer::daemon_heartbeat_ns() const {
  return header_->daemon_heartbeat_ns.load(std::memory_order_relaxed);
}

}  // namespace collective::shm
