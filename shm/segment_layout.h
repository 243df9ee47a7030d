// Everything that lives in shared memory, in one header used by the daemon
// and the client library. Plain data only: offsets, never pointers; every word
// that both sides write is a lock-free atomic of at most 8 bytes; no mutex and
// no shared heap allocator, so a client that dies at any instruction cannot
// wedge the daemon.
//
// Client segment (one per client, created by the daemon, mode 0600, owned by
// the client's uid):
//
//   [ ClientSegmentHeader        ] page 0
//   [ CompletionRecord ring      ] ring_capacity records, page aligned
//   [ text ring                  ] text_bytes, page aligned
//   [ submission ring            ] submit_bytes, page aligned
//   [ data arena                 ] arena_bytes, page aligned
//
// The completion ring carries the daemon's answers to the client, and the
// text ring the message of every answer that has one (a failure's text), so
// that a record and its text arrive together; the submission ring carries
// the client's requests and releases (serialized collective.v1.ClientMessage)
// to the daemon. Each ring has a futex word so that the side that waits can
// sleep.
//
// Result segment (one per job, written by the daemon, mapped read-only by
// the job's clients):
//
//   [ ResultSegmentHeader        ] page 0
//   [ data                       ] data_bytes
//
// Doorbell segment (one per job, one page, read-write for the job's clients):
// a single futex word that every client of the job rings after it publishes
// a submission while the engine sleeps on the doorbell (kernels without
// futex_waitv, or more clients than one futex_waitv takes).
//
//   [ DoorbellSegmentHeader      ] page 0
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace collective::shm {

inline constexpr uint32_t kLayoutVersion = 4;
inline constexpr uint64_t kClientSegmentMagic = 0x31544e45494c4343ull;    // "CCLIENT1"
inline constexpr uint64_t kResultSegmentMagic = 0x31544c5553455243ull;    // "CRESULT1"
inline constexpr uint64_t kDoorbellSegmentMagic = 0x314c4c4542524443ull;  // "CDRBELL1"
inline constexpr uint64_t kPageBytes = 4096;
// Every tensor the daemon places (and every block the client allocator hands
// out) starts on a cache line, so that vector loads never straddle one.
inline constexpr uint64_t kDataAlignment = 64;
// Submission ring records start on this boundary.
inline constexpr uint64_t kSubmitAlignment = 8;
// The largest submission record (header included). A client never needs more:
// one request is bounded by the name and dimension limits, and the client
// puts several requests into one record only while they fit.
inline constexpr uint32_t kMaxSubmitRecordBytes = 64 << 10;
// The smallest submission ring: a record of the largest size always fits.
inline constexpr uint64_t kMinSubmitRingBytes = 4 * uint64_t{kMaxSubmitRecordBytes};

// Texts in the text ring start on this boundary.
inline constexpr uint64_t kTextAlignment = 8;
// The longest text a record carries; the daemon cuts longer ones.
inline constexpr uint32_t kMaxRecordTextBytes = 8 << 10;
// The smallest text ring: room for several texts of the largest size.
inline constexpr uint64_t kMinTextRingBytes = 8 * uint64_t{kMaxRecordTextBytes};

// CompletionRecord.flags: the request's tensor lives in CUDA memory; its
// result is in the output it named (result_offset means nothing), and the
// slot's done event orders the client's reads after the daemon's writes.
inline constexpr uint32_t kRecordDeviceResult = 1;
// CompletionRecord.flags: the record refuses a submission that reused the
// id of a request still in flight (or whose result is still held); that
// request is unaffected and gets a record of its own.
inline constexpr uint32_t kRecordRefusedDuplicateId = 2;
// CompletionRecord.flags: the daemon wrote the result into the output the
// request named in the client's own arena (TensorRequest.output_offset);
// result_offset means nothing and there is nothing to release.
inline constexpr uint32_t kRecordResultInOutput = 4;

// One finished request. Written by the daemon into the slot
// `ring_head % ring_capacity` before it advances ring_head; read by the client.
struct CompletionRecord {
  uint64_t request_id;
  // absl::StatusCode. Non-zero: the request failed, and the record's text
  // says why.
  int32_t status_code;
  uint32_t flags;  // kRecordDeviceResult, kRecordRefusedDuplicateId, kRecordResultInOutput
  // Where the result lies in the result segment's data area.
  uint64_t result_offset;
  uint64_t result_bytes;
  // First dimension of the result: the client knows every other dimension.
  // For join: the last rank to join; for adding a process set: its id.
  int64_t result_dim0;
  // An array of aux_count int64 values in the result segment's data area, at
  // aux_offset (alltoall: the rows received from each rank); read under the
  // same release as the result.
  uint64_t aux_offset;
  uint32_t aux_count;
  // The record's text (a failure's message; none for a success): text_bytes
  // bytes of UTF-8 in the text ring, written before the record. text_position
  // counts every byte the ring ever held; the text lies at text_position
  // modulo the ring's size and never wraps. The client copies it out as it
  // takes the record, then hands the space back (text_tail).
  uint32_t text_bytes;
  uint64_t text_position;
};

// A record of the submission ring: this header, then `bytes` of payload,
// padded to kSubmitAlignment. A record never wraps: when the space left before
// the end of the ring is too small, the client writes a kPad record that
// fills it and starts over at offset 0.
struct SubmitRecordHeader {
  uint32_t bytes;
  uint32_t kind;
};
inline constexpr uint32_t kSubmitMessage = 1;  // payload: a ClientMessage
inline constexpr uint32_t kSubmitPad = 2;      // skip to the start of the ring

struct alignas(kDataAlignment) ClientSegmentHeader {
  // Written by the daemon before the client learns the segment's name;
  // constant afterwards.
  uint64_t magic;
  uint32_t layout_version;
  uint32_t ring_capacity;  // a power of two
  uint64_t epoch;          // the daemon instance that made the segment
  uint64_t client_id;
  int64_t client_pid;
  uint64_t segment_bytes;
  uint64_t ring_offset;  // from the start of the segment
  uint64_t arena_offset;
  uint64_t arena_bytes;
  uint64_t submit_offset;
  uint64_t submit_bytes;  // a power of two
  uint64_t text_offset;
  uint64_t text_bytes;  // a power of two

  // Daemon-written: CLOCK_MONOTONIC nanoseconds of the daemon's last sign of
  // life, so that a client can tell a hung daemon from a slow collective.
  alignas(kDataAlignment) std::atomic<uint64_t> daemon_heartbeat_ns;
  // Daemon-written: non-zero while a timeline records, so that the client
  // reports when it copies results out (ClientMessage.copy_outs).
  std::atomic<uint32_t> timeline_active;

  // Daemon-written: number of records ever published.
  alignas(kDataAlignment) std::atomic<uint64_t> ring_head;

  // Client-written: number of records ever consumed. The daemon never relies
  // on it for memory safety (slots are always indexed modulo capacity).
  alignas(kDataAlignment) std::atomic<uint64_t> ring_tail;
  // Client-written: the end (as a text_position) of the last text it copied
  // out; the text ring's space before it is free. The daemon only sizes its
  // next text by it (writes stay inside the ring whatever it says), so a
  // client that lies loses only its own texts.
  std::atomic<uint64_t> text_tail;

  // Futex word, bumped after every publish (by the daemon) and on local
  // events (by the client library's own threads).
  alignas(kDataAlignment) std::atomic<uint32_t> wake_word;
  // Client threads currently blocked in futex wait on wake_word. The daemon
  // issues the wake system call only when this is non-zero.
  std::atomic<uint32_t> sleepers;

  // Client-written: bytes ever published into the submission ring.
  alignas(kDataAlignment) std::atomic<uint64_t> submit_head;
  // Futex word the daemon's engine sleeps on; bumped after every publish.
  std::atomic<uint32_t> submit_word;

  // Daemon-written: bytes ever consumed from the submission ring.
  alignas(kDataAlignment) std::atomic<uint64_t> submit_tail;
  // A DaemonSleep value: kDaemonAwake, or while the engine sleeps (or is
  // about to) which word the client must ring after it bumped submit_word.
  std::atomic<uint32_t> daemon_sleeping;
};

// ClientSegmentHeader.daemon_sleeping.
enum DaemonSleep : uint32_t {
  kDaemonAwake = 0,
  // The engine waits on every client's submit_word at once (futex_waitv):
  // wake submit_word.
  kDaemonSleepsOnSubmitWord = 1,
  // The engine waits on the job's doorbell word alone: bump it, then wake it.
  kDaemonSleepsOnDoorbell = 2,
};

struct alignas(kDataAlignment) DoorbellSegmentHeader {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t reserved0;
  uint64_t epoch;
  uint64_t job_sequence;
  // Futex word: any client of the job bumps it (then wakes it) when the
  // engine sleeps on the doorbell. Every client may write it, so the daemon
  // takes its value as a hint only (see EngineDoorbell).
  alignas(kDataAlignment) std::atomic<uint32_t> word;
};

struct alignas(kDataAlignment) ResultSegmentHeader {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t reserved0;
  uint64_t epoch;
  uint64_t job_sequence;
  uint64_t data_offset;  // from the start of the segment
  uint64_t data_bytes;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4);
static_assert(std::is_standard_layout_v<ClientSegmentHeader>);
static_assert(std::is_standard_layout_v<ResultSegmentHeader>);
static_assert(std::is_standard_layout_v<DoorbellSegmentHeader>);
static_assert(sizeof(DoorbellSegmentHeader) <= kPageBytes);
static_assert(offsetof(DoorbellSegmentHeader, word) == 64);
static_assert(std::is_trivially_copyable_v<CompletionRecord>);
static_assert(sizeof(CompletionRecord) == 64);
static_assert(offsetof(CompletionRecord, aux_count) == 48);
static_assert(offsetof(CompletionRecord, text_bytes) == 52);
static_assert(offsetof(CompletionRecord, text_position) == 56);
static_assert(offsetof(ClientSegmentHeader, text_offset) == 88);
static_assert(offsetof(ClientSegmentHeader, text_bytes) == 96);
static_assert(sizeof(ClientSegmentHeader) <= kPageBytes);
static_assert(sizeof(ResultSegmentHeader) <= kPageBytes);
static_assert(sizeof(SubmitRecordHeader) == kSubmitAlignment);
static_assert(offsetof(ClientSegmentHeader, daemon_heartbeat_ns) == 128);
static_assert(offsetof(ClientSegmentHeader, ring_head) == 192);
static_assert(offsetof(ClientSegmentHeader, ring_tail) == 256);
static_assert(offsetof(ClientSegmentHeader, text_tail) == 264);
static_assert(offsetof(ClientSegmentHeader, wake_word) == 320);
static_assert(offsetof(ClientSegmentHeader, submit_head) == 384);
static_assert(offsetof(ClientSegmentHeader, submit_word) == 392);
static_assert(offsetof(ClientSegmentHeader, submit_tail) == 448);
static_assert(offsetof(ClientSegmentHeader, daemon_sleeping) == 456);

constexpr uint64_t RoundUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// Where each part of a client segment lies, derived from its two sizes. The
// daemon writes these into the header; the client checks them against it.
struct ClientSegmentGeometry {
  uint64_t ring_offset;
  uint64_t text_offset;
  uint64_t text_bytes;
  uint64_t submit_offset;
  uint64_t submit_bytes;
  uint64_t arena_offset;
  uint64_t arena_bytes;
  uint64_t segment_bytes;
};

// `ring_capacity`, `text_bytes` and `submit_bytes` must be powers of two,
// text_bytes at least kMinTextRingBytes, submit_bytes at least
// kMinSubmitRingBytes.
constexpr ClientSegmentGeometry ComputeClientSegmentGeometry(uint32_t ring_capacity,
                                                             uint64_t text_bytes,
                                                             uint64_t submit_bytes,
                                                             uint64_t arena_bytes) {
  const uint64_t ring_offset = kPageBytes;
  const uint64_t text_offset =
      RoundUp(ring_offset + uint64_t{ring_capacity} * sizeof(CompletionRecord), kPageBytes);
  const uint64_t submit_offset = RoundUp(text_offset + text_bytes, kPageBytes);
  const uint64_t arena_offset = RoundUp(submit_offset + submit_bytes, kPageBytes);
  const uint64_t arena = RoundUp(arena_bytes, kPageBytes);
  return {ring_offset,  text_offset,  text_bytes, submit_offset,
          submit_bytes, arena_offset, arena,      arena_offset + arena};
}

}  // namespace collective::shm
