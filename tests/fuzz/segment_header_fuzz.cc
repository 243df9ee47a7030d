// libFuzzer target: the client-writable words of a client segment's header
// that the daemon reads (text_tail, which sizes the room for the next
// failure's text; sleepers, which decides the wake), against the daemon's
// completion publisher (shm/completion_ring), in a real segment. The
// daemon's own counters and geometry never come from the header (the
// publisher keeps private copies), so they are not input here. The result
// segment has no such words: clients map it read-only.
//
// Input: steps. 0: the daemon publishes a record with a text (length u16,
// character width u8); 1: the client writes text_tail (u64, any value: a
// lie); 2: the client takes a record, honestly; 3: the client writes
// sleepers (u32). Checked beyond "no crash": whatever the client wrote, the
// daemon writes only the completion ring, the text ring and its own header
// words (the pages around them keep their contents), a text never wraps and
// is well-formed UTF-8; and while the client has not lied, every record
// reaches it with its text whole or cut with a "..." mark.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "shm/client_segment.h"
#include "shm/completion_ring.h"
#include "shm/segment_layout.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/utf8.h"

namespace collective::fuzz {
namespace {

constexpr uint32_t kRingCapacity = 8;
constexpr std::byte kCanary{0x5c};
// Characters of 1 to 4 bytes, so that cuts meet every kind of boundary.
constexpr std::string_view kCharacters[] = {"a", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};

shm::ClientSegment& Segment() {
  static shm::ClientSegment* segment = [] {
    absl::StatusOr<std::unique_ptr<shm::ClientSegment>> created =
        shm::ClientSegment::Create({.name = absl::StrCat("collective-fuzz-segment-", getpid()),
                                    .arena_bytes = shm::kPageBytes,
                                    .ring_capacity = kRingCapacity,
                                    .text_bytes = shm::kMinTextRingBytes,
                                    .submit_bytes = shm::kMinSubmitRingBytes,
                                    .owner_uid = getuid(),
                                    .owner_gid = getgid()});
    Require(created.ok(), "the fuzz target can create a client segment in /dev/shm");
    (*created)->Unlink();  // nothing left behind, however the run ends
    return created->release();
  }();
  return *segment;
}

// The bytes the publisher must not touch: the padding after the completion
// ring, and the first page after the text ring (the submission ring's).
struct Fences {
  std::byte* after_ring;
  size_t after_ring_bytes;
  std::byte* after_texts;
  size_t after_texts_bytes;
};

Fences FencesOf(const shm::ClientSegment& segment) {
  std::byte* ring_end = reinterpret_cast<std::byte*>(segment.ring() + segment.ring_capacity());
  return {ring_end, static_cast<size_t>(segment.text_ring() - ring_end),
          segment.text_ring() + segment.text_bytes(), shm::kPageBytes};
}

bool Untouched(const std::byte* at, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) {
    if (at[i] != kCanary) return false;
  }
  return true;
}

}  // namespace

void FuzzOne(FuzzInput& input) {
  shm::ClientSegment& segment = Segment();
  shm::ClientSegmentHeader& header = *segment.header();
  header.ring_head.store(0);
  header.ring_tail.store(0);
  header.text_tail.store(0);
  header.sleepers.store(0);
  const Fences fences = FencesOf(segment);
  std::memset(fences.after_ring, static_cast<int>(kCanary), fences.after_ring_bytes);
  std::memset(fences.after_texts, static_cast<int>(kCanary), fences.after_texts_bytes);
  // Written once by the daemon at creation, up to and including text_bytes.
  constexpr size_t kConstantBytes = offsetof(shm::ClientSegmentHeader, text_bytes) + 8;
  std::byte constants[kConstantBytes];
  std::memcpy(constants, &header, kConstantBytes);

  shm::RingPublisher publisher(segment);
  shm::RingConsumer consumer(segment);
  bool honest = true;
  std::deque<std::string> unread;  // texts published and not yet taken
  uint64_t request_id = 0;
  for (int steps = 0; !input.empty() && steps < 1024; ++steps) {
    switch (input.Take<uint8_t>() % 4) {
      case 0: {
        const size_t length = input.Take<uint16_t>() % (2 * shm::kMaxRecordTextBytes);
        const std::string_view character = kCharacters[input.Take<uint8_t>() % 4];
        std::string text;
        while (text.size() + character.size() <= length) text += character;
        // The engine never has more records outstanding than the ring holds.
        if (unread.size() >= kRingCapacity) break;
        shm::CompletionRecord record{};
        record.request_id = ++request_id;
        record.status_code = 3;
        publisher.Publish(record, text);
        const shm::CompletionRecord& written =
            segment.ring()[(publisher.published() - 1) % kRingCapacity];
        const uint64_t position = written.text_position % segment.text_bytes();
        Require(written.text_bytes <= shm::kMaxRecordTextBytes &&
                    written.text_bytes <= segment.text_bytes() - position,
                "a text is at most the largest text and never wraps");
        Require(
            IsUtf8(std::string_view(reinterpret_cast<const char*>(segment.text_ring()) + position,
                                    written.text_bytes)),
            "a text in the ring is well-formed UTF-8");
        // Only a publish writes; the fences are checked after each.
        Require(Untouched(fences.after_ring, fences.after_ring_bytes) &&
                    Untouched(fences.after_texts, fences.after_texts_bytes),
                "the daemon writes nothing outside the completion and text rings");
        Require(std::memcmp(constants, &header, kConstantBytes) == 0,
                "the daemon never rewrites the header's geometry");
        unread.push_back(std::move(text));
        break;
      }
      case 1:
        header.text_tail.store(input.Take<uint64_t>());
        honest = false;
        break;
      case 2: {
        const std::optional<shm::Completion> taken = consumer.TryPop();
        Require(taken.has_value() == !unread.empty(), "the client sees every record published");
        if (!taken.has_value()) break;
        const std::string& sent = unread.front();
        if (honest) {
          const std::string& got = taken->text;
          const bool whole = got == sent;
          const bool cut = got.size() >= 3 && got.ends_with("...") &&
                           sent.starts_with(std::string_view(got).substr(0, got.size() - 3));
          Require(whole || cut || got.empty(),
                  "an honest client gets each text whole or cut with a mark");
        }
        unread.pop_front();
        break;
      }
      case 3:
        header.sleepers.store(input.Take<uint32_t>() & 1);
        break;
    }
  }
}

}  // namespace collective::fuzz
