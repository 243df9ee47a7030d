#include "shm/completion_ring.h"

#include "shm/futex.h"

namespace collective::shm {

RingPublisher::RingPublisher(ClientSegmentHeader* header, CompletionRecord* slots,
                             uint32_t capacity)
    : header_(header), slots_(slots), mask_(capacity - 1), head_(0) {}

void RingPublisher::Publish(const CompletionRecord& record) {
  slots_[head_ & mask_] = record;
  ++head_;
  header_->ring_head.store(head_, std::memory_order_release);
  // Dekker pair with the client's BeginSleep: it raises `sleepers` before it
  // re-reads the wake word; we bump the wake word before we read `sleepers`.
  // One of us sees the other, so a sleeping client is never missed.
  header_->wake_word.fetch_add(1, std::memory_order_seq_cst);
  if (header_->sleepers.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&header_->wake_word);
}

RingConsumer::RingConsumer(ClientSegmentHeader* header, const CompletionRecord* slots)
    : header_(header), slots_(slots), tail_(header->ring_tail.load(std::memory_order_relaxed)) {}

std::optional<CompletionRecord> RingConsumer::TryPop() {
  if (header_->ring_head.load(std::memory_order_acquire) == tail_) return std::nullopt;
  CompletionRecord record = slots_[tail_ & (header_->ring_capacity - 1)];
  ++tail_;
  header_->ring_tail.store(tail_, std::memory_order_release);
  return record;
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
