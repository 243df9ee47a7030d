// The two views of a client segment's completion ring: the daemon publishes,
// the client consumes. Single producer, single consumer.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "shm/segment_layout.h"

namespace collective::shm {

// Daemon side. Keeps its own head counter and capacity: the header is
// client-writable memory, so nothing the daemon indexes with is read back
// from it.
class RingPublisher {
 public:
  // `capacity` is what the daemon created the ring with (a power of two).
  RingPublisher(ClientSegmentHeader* header, CompletionRecord* slots, uint32_t capacity);

  // Writes the record, makes it visible, and wakes the client if any of its
  // threads sleeps. The caller keeps the number of outstanding requests at or
  // below the ring capacity, so an honest client never loses a record; a
  // client that lies about its tail only overwrites its own unread records.
  void Publish(const CompletionRecord& record);

  uint64_t published() const { return head_; }

 private:
  ClientSegmentHeader* header_;
  CompletionRecord* slots_;
  uint64_t mask_;
  uint64_t head_;
};

// Client side.
class RingConsumer {
 public:
  RingConsumer(ClientSegmentHeader* header, const CompletionRecord* slots);

  // The next unread record, if any. One thread at a time.
  std::optional<CompletionRecord> TryPop();
  // Whether every published record has been popped. Any thread.
  bool Empty() const;

  // The wake word moves on every publish and every WakeLocal. A waiter reads
  // it before checking what it waits for; if nothing is there, it sleeps
  // (BeginSleep, Sleep(snapshot) when the word has not moved, EndSleep), so
  // that nothing published after its check can be missed.
  uint32_t WakeWord() const;
  void BeginSleep();
  void Sleep(uint32_t snapshot, absl::Duration timeout);
  void EndSleep();

  // Ends every sleep in this client (for the library's own threads).
  void WakeLocal();

  uint64_t daemon_heartbeat_ns() const;

 private:
  ClientSegmentHeader* header_;
  const CompletionRecord* slots_;
  uint64_t tail_;
};

}  // namespace collective::shm
