// libFuzzer target: the daemon's reader of a client's submission ring
// (shm/submission_ring), over a ring and header in ordinary memory so that
// AddressSanitizer sees every read outside them.
//
// Input, first byte even ("image"): the reader's starting tail (u64, aligned
// as the reader's always is), the number of unread bytes the client claims
// (u64), then the ring's bytes from the tail on, as a hostile client may
// have written them. Every record the reader hands out is parsed and
// validated as the engine does.
//
// First byte odd ("round trip"): a starting position (u64), then steps: an
// even byte pushes the blob that follows through the client's writer, an odd
// one pops a record through the reader. Every payload pushed comes out
// unchanged and in order.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "collective/v1/collective.pb.h"
#include "daemon/job/request_validator.h"
#include "shm/segment_layout.h"
#include "shm/submission_ring.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_input.h"

namespace collective::fuzz {
namespace {

// Small, so that inputs cover a whole ring and wrap often.
constexpr uint64_t kRingBytes = 4096;

struct Ring {
  Ring() : header(std::make_unique<shm::ClientSegmentHeader>()), bytes(new std::byte[kRingBytes]) {}
  std::unique_ptr<shm::ClientSegmentHeader> header;
  std::unique_ptr<std::byte[]> bytes;
};

void ReadImage(FuzzInput& input) {
  Ring ring;
  // The reader's tail starts where the daemon's header said (0, before the
  // client knew the segment) and moves by whole records: always aligned.
  const uint64_t tail = input.Take<uint64_t>() & ~(shm::kSubmitAlignment - 1);
  const uint64_t unread = input.Take<uint64_t>();
  const std::string_view image = input.Rest();
  for (uint64_t i = 0; i < kRingBytes; ++i) {
    ring.bytes[(tail + i) & (kRingBytes - 1)] =
        i < image.size() ? static_cast<std::byte>(image[i]) : std::byte{0};
  }
  ring.header->submit_tail.store(tail);
  ring.header->submit_head.store(tail + unread);
  shm::SubmissionReader reader(ring.header.get(), ring.bytes.get(), kRingBytes);
  const daemon::job::RequestLimits limits{.arena_bytes = 1 << 20};
  std::string payload;
  v1::ClientMessage message;
  // Each record consumes at least a header's bytes; the bound is a backstop.
  for (uint64_t records = 0; records <= kRingBytes; ++records) {
    absl::StatusOr<bool> next = reader.Next(&payload);
    if (!next.ok() || !*next) return;
    Require(payload.size() <= kRingBytes - sizeof(shm::SubmitRecordHeader),
            "a record the reader accepts lies inside the ring");
    Require(ring.header->submit_tail.load() - tail <= unread,
            "the reader never consumes more than the client published");
    if (!message.ParseFromString(payload)) continue;
    for (const v1::TensorRequest& request : message.submit().requests()) {
      (void)daemon::job::ValidateRequest(request, limits);
    }
  }
  Broken("the reader returns every record of a ring in a bounded number of calls");
}

void RoundTrip(FuzzInput& input) {
  Ring ring;
  const uint64_t start = input.Take<uint64_t>() & ~(shm::kSubmitAlignment - 1);
  ring.header->submit_head.store(start);
  ring.header->submit_tail.store(start);
  std::atomic<uint32_t> doorbell{0};  // the job's doorbell word: never rung here
  shm::SubmissionWriter writer(ring.header.get(), ring.bytes.get(), kRingBytes, &doorbell);
  shm::SubmissionReader reader(ring.header.get(), ring.bytes.get(), kRingBytes);
  std::deque<std::string> in_flight;
  std::string payload;
  auto pop = [&] {
    absl::StatusOr<bool> next = reader.Next(&payload);
    Require(next.ok(), "the reader accepts what the writer wrote");
    Require(*next == !in_flight.empty(), "the reader sees a record exactly when one was pushed");
    if (!*next) return;
    Require(payload == in_flight.front(), "records come out unchanged and in order");
    in_flight.pop_front();
  };
  while (!input.empty()) {
    if ((input.Take<uint8_t>() & 1) != 0) {
      pop();
      continue;
    }
    const std::string_view blob = input.TakeBlob(kRingBytes);
    if (writer.TryPush(blob.data(), blob.size())) {
      in_flight.emplace_back(blob);
    } else {
      const uint64_t record =
          sizeof(shm::SubmitRecordHeader) + shm::RoundUp(blob.size(), shm::kSubmitAlignment);
      Require(!in_flight.empty() || record > kRingBytes / 2,
              "an empty ring takes any record of at most half its size");
    }
  }
  while (!in_flight.empty()) pop();
  Require(reader.Empty(), "a drained ring is empty");
}

}  // namespace

void FuzzOne(FuzzInput& input) {
  if ((input.Take<uint8_t>() & 1) == 0) {
    ReadImage(input);
  } else {
    RoundTrip(input);
  }
}

}  // namespace collective::fuzz
