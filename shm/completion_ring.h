// The two views of a client segment's completion ring and of the text ring
// beside it: the daemon publishes records (a failure's with its text), the
// client takes them, each with its text. Single producer, single consumer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "shm/client_segment.h"
#include "shm/segment_layout.h"

namespace collective::shm {

// A record as the client takes it: the record and its text (a failure's
// message; empty for a success).
struct Completion {
  CompletionRecord record;
  std::string text;
};

// Daemon side. Keeps its own head counters and the rings' geometry: the
// header is client-writable memory, so nothing the daemon indexes with is
// read back from it.
class RingPublisher {
 public:
  // `segment` is the one the daemon created.
  explicit RingPublisher(const ClientSegment& segment);

  // Writes `text` (cut to kMaxRecordTextBytes, or to the room the client
  // left in the text ring) and then the record, which says where the text
  // lies, makes both visible, and wakes the client if any of its threads
  // sleeps. The caller keeps the number of outstanding requests at or below
  // the ring capacity, so an honest client never loses a record; a client
  // that lies about its tails only overwrites its own unread records and
  // texts.
  void Publish(CompletionRecord record, absl::string_view text = {});

  uint64_t published() const { return head_; }

 private:
  // Places `text` in the text ring and says where in `record`.
  void PlaceText(absl::string_view text, CompletionRecord& record);

  ClientSegmentHeader* header_;
  CompletionRecord* slots_;
  uint64_t mask_;
  uint64_t head_;
  std::byte* texts_;
  uint64_t text_bytes_;
  uint64_t text_head_;
};

// Client side.
class RingConsumer {
 public:
  explicit RingConsumer(const ClientSegment& segment);

  // The next unread record, with its text, if any. One thread at a time.
  std::optional<Completion> TryPop();
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
  uint64_t mask_;
  uint64_t tail_;
  const std::byte* texts_;
  uint64_t text_bytes_;
};

}  // namespace collective::shm
