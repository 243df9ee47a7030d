// shm/: the segment layout's fixed facts (version 3), client and result segments (create,
// open, every check on open, permissions), the completion ring (ordering,
// wrap-around, wake word) and its text ring (texts with their records, cut to
// fit, never written outside the ring whatever the client says), a
// cross-process futex wake, and segment names.
#include <atomic>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "shm/client_segment.h"
#include "shm/completion_ring.h"
#include "shm/doorbell_segment.h"
#include "shm/futex.h"
#include "shm/liveness_mark.h"
#include "shm/result_segment.h"
#include "shm/segment_layout.h"
#include "shm/segment_names.h"
#include "shm/submission_ring.h"

namespace collective::shm {
namespace {

using ::testing::HasSubstr;

std::string UniqueName(const std::string& what) {
  static int counter = 0;
  return absl::StrCat("collective-shm-test.", ::getpid(), ".", counter++, ".", what);
}

bool ShmExists(const std::string& name) {
  struct stat info {};
  return ::stat(("/dev/shm/" + name).c_str(), &info) == 0;
}

// --- Layout -----------------------------------------------------------------

TEST(SegmentLayoutTest, FixedFacts) {
  // Version 3: completion records carry their text (a failure's message) in
  // the text ring, which lies between the completion and submission rings.
  EXPECT_EQ(kLayoutVersion, 4u);
  EXPECT_EQ(kPageBytes, 4096u);
  EXPECT_EQ(kDataAlignment, 64u);
  EXPECT_EQ(sizeof(CompletionRecord), 64u);
  EXPECT_EQ(offsetof(CompletionRecord, request_id), 0u);
  EXPECT_EQ(offsetof(CompletionRecord, status_code), 8u);
  EXPECT_EQ(offsetof(CompletionRecord, result_offset), 16u);
  EXPECT_EQ(offsetof(CompletionRecord, result_bytes), 24u);
  EXPECT_EQ(offsetof(CompletionRecord, flags), 12u);
  EXPECT_EQ(offsetof(CompletionRecord, result_dim0), 32u);
  EXPECT_EQ(offsetof(CompletionRecord, aux_offset), 40u);
  EXPECT_EQ(offsetof(CompletionRecord, aux_count), 48u);
  EXPECT_EQ(offsetof(CompletionRecord, text_bytes), 52u);
  EXPECT_EQ(offsetof(CompletionRecord, text_position), 56u);
  EXPECT_TRUE(std::is_trivially_copyable_v<CompletionRecord>);
  EXPECT_EQ(offsetof(ClientSegmentHeader, magic), 0u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, layout_version), 8u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, ring_capacity), 12u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, text_offset), 88u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, text_bytes), 96u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, daemon_heartbeat_ns), 128u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, timeline_active), 136u)
      << "in the heartbeat's cache line, written by the daemon only";
  EXPECT_EQ(offsetof(ClientSegmentHeader, ring_head), 192u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, ring_tail), 256u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, text_tail), 264u)
      << "in the ring tail's cache line, written by the client only";
  EXPECT_EQ(offsetof(ClientSegmentHeader, wake_word), 320u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, sleepers), 324u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, submit_head), 384u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, submit_word), 392u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, submit_tail), 448u);
  EXPECT_EQ(offsetof(ClientSegmentHeader, daemon_sleeping), 456u);
  EXPECT_LE(sizeof(ClientSegmentHeader), kPageBytes);
  EXPECT_LE(sizeof(ResultSegmentHeader), kPageBytes);
  EXPECT_EQ(alignof(ClientSegmentHeader), kDataAlignment);
  // The magics spell their names in little-endian bytes.
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(&kClientSegmentMagic), 8), "CCLIENT1");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(&kResultSegmentMagic), 8), "CRESULT1");
}

TEST(SegmentLayoutTest, ClientSegmentGeometry) {
  const ClientSegmentGeometry small =
      ComputeClientSegmentGeometry(8, kMinTextRingBytes, kMinSubmitRingBytes, 4096);
  EXPECT_EQ(small.ring_offset, 4096u);
  EXPECT_EQ(small.text_offset, 8192u);
  EXPECT_EQ(small.text_bytes, kMinTextRingBytes);
  EXPECT_EQ(small.submit_offset, 8192u + kMinTextRingBytes);
  EXPECT_EQ(small.submit_bytes, kMinSubmitRingBytes);
  EXPECT_EQ(small.arena_offset, 8192u + kMinTextRingBytes + kMinSubmitRingBytes);
  EXPECT_EQ(small.arena_bytes, 4096u);
  EXPECT_EQ(small.segment_bytes, small.arena_offset + 4096u);

  const ClientSegmentGeometry odd =
      ComputeClientSegmentGeometry(64, kMinTextRingBytes, kMinSubmitRingBytes, 1);
  EXPECT_EQ(odd.text_offset, 8192u) << "64 records fill exactly one page";
  EXPECT_EQ(odd.arena_bytes, 4096u) << "arenas are whole pages";

  const ClientSegmentGeometry big =
      ComputeClientSegmentGeometry(8192, 1 << 20, 1 << 20, 256ull << 20);
  EXPECT_EQ(big.text_offset, 4096u + 8192u * 64u);
  EXPECT_EQ(big.submit_offset, big.text_offset + (1 << 20));
  EXPECT_EQ(big.arena_offset, big.submit_offset + (1 << 20));
  EXPECT_EQ(big.arena_offset % kPageBytes, 0u);
  EXPECT_EQ(big.segment_bytes, big.arena_offset + (256ull << 20));

  EXPECT_EQ(kMinSubmitRingBytes, 4u * kMaxSubmitRecordBytes);
  EXPECT_EQ(kMinTextRingBytes, 8u * kMaxRecordTextBytes);
  EXPECT_EQ(sizeof(SubmitRecordHeader), kSubmitAlignment);
  EXPECT_EQ(RoundUp(0, 64), 0u);
  EXPECT_EQ(RoundUp(1, 64), 64u);
  EXPECT_EQ(RoundUp(64, 64), 64u);
  EXPECT_EQ(ResultSegment::SegmentBytes(1), 8192u);
  EXPECT_EQ(ResultSegment::SegmentBytes(4096), 8192u);
}

// --- Client segments ------------------------------------------------------------

ClientSegment::CreateOptions Options(const std::string& name) {
  return {.name = name,
          .arena_bytes = 10000,
          .ring_capacity = 5,
          .epoch = 0xfeed,
          .client_id = 7,
          .client_pid = ::getpid(),
          .owner_uid = ::geteuid(),
          .owner_gid = ::getegid()};
}

TEST(ClientSegmentTest, CreateThenOpenSeesTheSameMemory) {
  const std::string name = UniqueName("client");
  auto created = ClientSegment::Create(Options(name));
  ASSERT_TRUE(created.ok()) << created.status();
  ClientSegment& daemon_side = **created;
  const ClientSegmentHeader* header = daemon_side.header();
  EXPECT_EQ(header->magic, kClientSegmentMagic);
  EXPECT_EQ(header->layout_version, kLayoutVersion);
  EXPECT_EQ(header->ring_capacity, 8u) << "rounded up to a power of two";
  EXPECT_EQ(header->epoch, 0xfeedu);
  EXPECT_EQ(header->client_id, 7u);
  EXPECT_EQ(header->client_pid, ::getpid());
  EXPECT_EQ(header->timeline_active.load(), 0u) << "no timeline until the daemon says so";
  EXPECT_EQ(header->ring_offset, kPageBytes);
  EXPECT_EQ(header->text_offset, 2 * kPageBytes);
  EXPECT_EQ(header->text_bytes, kMinTextRingBytes) << "raised to the minimum";
  EXPECT_EQ(header->submit_offset, 2 * kPageBytes + kMinTextRingBytes);
  EXPECT_EQ(header->submit_bytes, kMinSubmitRingBytes) << "raised to the minimum";
  EXPECT_EQ(header->arena_offset, 2 * kPageBytes + kMinTextRingBytes + kMinSubmitRingBytes);
  EXPECT_EQ(header->arena_bytes, 12288u);
  EXPECT_EQ(header->segment_bytes, daemon_side.size());
  EXPECT_EQ(header->segment_bytes, header->arena_offset + 12288u);
  EXPECT_EQ(daemon_side.arena_bytes(), 12288u);
  EXPECT_EQ(daemon_side.submit_bytes(), kMinSubmitRingBytes);
  EXPECT_EQ(daemon_side.text_bytes(), kMinTextRingBytes);
  EXPECT_EQ(daemon_side.name(), name);

  struct stat info {};
  ASSERT_EQ(::stat(("/dev/shm/" + name).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(info.st_size, static_cast<off_t>(daemon_side.size()));

  auto opened = ClientSegment::Open(name, daemon_side.size(), 0xfeed, 7);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ClientSegment& client_side = **opened;
  EXPECT_EQ(client_side.arena_bytes(), daemon_side.arena_bytes());
  EXPECT_EQ(client_side.arena() - reinterpret_cast<std::byte*>(client_side.header()),
            static_cast<ptrdiff_t>(header->arena_offset));
  EXPECT_EQ(client_side.text_ring() - reinterpret_cast<std::byte*>(client_side.header()),
            static_cast<ptrdiff_t>(2 * kPageBytes));
  EXPECT_EQ(client_side.text_bytes(), kMinTextRingBytes);
  EXPECT_EQ(client_side.submit_ring() - reinterpret_cast<std::byte*>(client_side.header()),
            static_cast<ptrdiff_t>(2 * kPageBytes + kMinTextRingBytes));
  std::memcpy(client_side.arena() + 100, "hello", 5);
  EXPECT_EQ(std::memcmp(daemon_side.arena() + 100, "hello", 5), 0);
  client_side.ring()[3].request_id = 99;
  EXPECT_EQ(daemon_side.ring()[3].request_id, 99u);

  // The creator owns the name; the opener does not remove it.
  opened->reset();
  EXPECT_TRUE(ShmExists(name));
  created->reset();
  EXPECT_FALSE(ShmExists(name));
}

TEST(ClientSegmentTest, CreateRefusesAnExistingName) {
  const std::string name = UniqueName("twice");
  auto first = ClientSegment::Create(Options(name));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = ClientSegment::Create(Options(name));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("already exists"));
  EXPECT_TRUE(ShmExists(name)) << "the refusal must not remove the first segment";
}

TEST(ClientSegmentTest, UnlinkRemovesTheNameButKeepsTheMapping) {
  const std::string name = UniqueName("unlink");
  auto created = ClientSegment::Create(Options(name));
  ASSERT_TRUE(created.ok());
  (*created)->Unlink();
  EXPECT_FALSE(ShmExists(name));
  (*created)->arena()[0] = std::byte{1};  // still mapped
  EXPECT_EQ(ClientSegment::Open(name, (*created)->size(), 0xfeed, 7).status().code(),
            absl::StatusCode::kNotFound);
}

class ClientSegmentOpenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = UniqueName("open");
    auto created = ClientSegment::Create(Options(name_));
    ASSERT_TRUE(created.ok()) << created.status();
    segment_ = std::move(*created);
  }
  absl::Status Open(uint64_t bytes, uint64_t epoch = 0xfeed, uint64_t client_id = 7) {
    return ClientSegment::Open(name_, bytes, epoch, client_id).status();
  }

  std::string name_;
  std::unique_ptr<ClientSegment> segment_;
};

TEST_F(ClientSegmentOpenTest, RefusesABadMagic) {
  segment_->header()->magic ^= 1;
  const absl::Status status = Open(segment_->size());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(absl::StrCat("this client speaks version ", kLayoutVersion)));
}

TEST_F(ClientSegmentOpenTest, RefusesAnotherLayoutVersion) {
  // An older daemon's segment (version 2 has no text ring) and a newer one's.
  for (uint32_t version : {kLayoutVersion - 1, kLayoutVersion + 1}) {
    segment_->header()->layout_version = version;
    const absl::Status status = Open(segment_->size());
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(absl::StrCat("has layout version ", version)));
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(absl::StrCat("this client speaks version ", kLayoutVersion)));
  }
  segment_->header()->layout_version = kLayoutVersion;
  EXPECT_TRUE(Open(segment_->size()).ok());
}

TEST_F(ClientSegmentOpenTest, RefusesAnotherEpochOrClient) {
  for (const absl::Status& status :
       {Open(segment_->size(), 0xbeef, 7), Open(segment_->size(), 0xfeed, 8)}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("belongs to another daemon instance or client"));
  }
}

TEST_F(ClientSegmentOpenTest, RefusesTheWrongSize) {
  const absl::Status status = Open(segment_->size() + kPageBytes);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(absl::StrCat("has ", segment_->size(), " bytes, expected ",
                                     segment_->size() + kPageBytes)));
  const absl::Status tiny = Open(100);
  EXPECT_EQ(tiny.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(tiny.message()), HasSubstr("too small to hold its header"));
}

TEST_F(ClientSegmentOpenTest, RefusesAnInconsistentHeader) {
  segment_->header()->ring_capacity = 6;
  EXPECT_THAT(std::string(Open(segment_->size()).message()), HasSubstr("inconsistent header"));
  segment_->header()->ring_capacity = 8;
  segment_->header()->arena_bytes += kPageBytes;
  EXPECT_THAT(std::string(Open(segment_->size()).message()), HasSubstr("inconsistent header"));
  segment_->header()->arena_bytes -= kPageBytes;
  segment_->header()->arena_offset += kPageBytes;
  EXPECT_THAT(std::string(Open(segment_->size()).message()), HasSubstr("inconsistent header"));
  segment_->header()->arena_offset -= kPageBytes;
  segment_->header()->submit_bytes /= 2;
  EXPECT_THAT(std::string(Open(segment_->size()).message()), HasSubstr("inconsistent header"));
  segment_->header()->submit_bytes *= 2;
  segment_->header()->text_bytes /= 2;
  EXPECT_THAT(std::string(Open(segment_->size()).message()), HasSubstr("inconsistent header"));
  segment_->header()->text_bytes *= 2;
  segment_->header()->text_offset += kPageBytes;
  EXPECT_THAT(std::string(Open(segment_->size()).message()), HasSubstr("inconsistent header"));
  segment_->header()->text_offset -= kPageBytes;
  EXPECT_TRUE(Open(segment_->size()).ok());
}

TEST_F(ClientSegmentOpenTest, RefusesAMissingSegment) {
  const absl::Status status =
      ClientSegment::Open(UniqueName("missing"), segment_->size(), 0xfeed, 7).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("does not exist"));
}

// --- Result segments ------------------------------------------------------------

// Whether this process maps [address, ...) readable, not writable, shared.
std::string MappingPermissions(const void* address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto target = reinterpret_cast<uintptr_t>(address);
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range;
    std::string permissions;
    fields >> range >> permissions;
    const size_t dash = range.find('-');
    const uintptr_t begin = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (target >= begin && target < end) return permissions;
  }
  return "";
}

class ResultSegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = UniqueName("result");
    auto created = ResultSegment::Create({.name = name_,
                                          .data_bytes = 5000,
                                          .epoch = 0xabc,
                                          .job_sequence = 3,
                                          .owner_uid = ::geteuid(),
                                          .owner_gid = ::getegid(),
                                          .mode = 0400});
    ASSERT_TRUE(created.ok()) << created.status();
    segment_ = std::move(*created);
  }

  std::string name_;
  std::unique_ptr<ResultSegment> segment_;
};

TEST_F(ResultSegmentTest, CreateThenOpenReadOnly) {
  EXPECT_EQ(segment_->data_bytes(), 8192u);
  EXPECT_EQ(segment_->size(), 3 * kPageBytes);
  std::memcpy(segment_->mutable_data() + 8000, "result", 6);

  auto opened = ResultSegment::OpenReadOnly(name_, segment_->size(), 0xabc);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(std::memcmp((*opened)->data() + 8000, "result", 6), 0);
  EXPECT_EQ((*opened)->data_bytes(), segment_->data_bytes());

  struct stat info {};
  ASSERT_EQ(::stat(("/dev/shm/" + name_).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0400u);
}

TEST_F(ResultSegmentTest, OpenChecksEpochAndSize) {
  const auto other = ResultSegment::OpenReadOnly(name_, segment_->size(), 0xdef);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(other.status().message()), HasSubstr("does not match this daemon"));
  EXPECT_EQ(
      ResultSegment::OpenReadOnly(name_, segment_->size() - kPageBytes, 0xabc).status().code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResultSegment::OpenReadOnly(name_, 10, 0xabc).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ResultSegmentTest, ClientMappingIsReadOnly) {
  auto opened = ResultSegment::OpenReadOnly(name_, segment_->size(), 0xabc);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const std::byte* data = (*opened)->data();
  EXPECT_EQ(MappingPermissions(data), "r--s");
  EXPECT_EQ(MappingPermissions(segment_->mutable_data()), "rw-s");

  // A write through the client's mapping faults.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The kernel's answer, not a handler's (AddressSanitizer's reports a
    // fault and exits with 1).
    ::signal(SIGSEGV, SIG_DFL);
    *const_cast<volatile std::byte*>(data) = std::byte{1};
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV)
      << "the write did not fault (status " << status << ")";
  EXPECT_EQ(segment_->data()[0], std::byte{0});
}

// --- Completion ring ---------------------------------------------------------------

class CompletionRingTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeRing(4); }

  void MakeRing(uint32_t ring_capacity) {
    ClientSegment::CreateOptions options = Options(UniqueName("ring"));
    options.ring_capacity = ring_capacity;
    auto created = ClientSegment::Create(options);
    ASSERT_TRUE(created.ok()) << created.status();
    segment_ = std::move(*created);
    publisher_ = std::make_unique<RingPublisher>(*segment_);
    consumer_ = std::make_unique<RingConsumer>(*segment_);
  }

  static CompletionRecord Record(uint64_t id) {
    CompletionRecord record{};
    record.request_id = id;
    record.status_code = static_cast<int32_t>(id % 3);
    record.result_offset = id * 64;
    record.result_bytes = id + 1;
    record.result_dim0 = static_cast<int64_t>(id) - 5;
    record.aux_offset = id * 128 + 64;
    record.aux_count = static_cast<uint32_t>(id % 5);
    return record;
  }

  std::unique_ptr<ClientSegment> segment_;
  std::unique_ptr<RingPublisher> publisher_;
  std::unique_ptr<RingConsumer> consumer_;
};

TEST_F(CompletionRingTest, DeliversRecordsInOrderAcrossWrapArounds) {
  EXPECT_TRUE(consumer_->Empty());
  EXPECT_FALSE(consumer_->TryPop().has_value());
  uint64_t next_published = 0;
  uint64_t next_consumed = 0;
  // Batches of 1 to 4 records (the capacity), 40 rounds: wraps many times.
  for (int round = 0; round < 40; ++round) {
    const int batch = round % 4 + 1;
    for (int i = 0; i < batch; ++i) publisher_->Publish(Record(next_published++));
    EXPECT_FALSE(consumer_->Empty());
    EXPECT_EQ(segment_->header()->ring_head.load(), next_published);
    for (int i = 0; i < batch; ++i) {
      const auto completion = consumer_->TryPop();
      ASSERT_TRUE(completion.has_value());
      const CompletionRecord expected = Record(next_consumed++);
      EXPECT_EQ(std::memcmp(&completion->record, &expected, sizeof(expected)), 0)
          << "record " << round;
      EXPECT_EQ(completion->text, "");
    }
    EXPECT_TRUE(consumer_->Empty());
    EXPECT_FALSE(consumer_->TryPop().has_value());
    EXPECT_EQ(segment_->header()->ring_tail.load(), next_consumed);
  }
  EXPECT_EQ(publisher_->published(), next_published);
  // Slot i % capacity holds the latest record published there.
  EXPECT_EQ(segment_->ring()[(next_published - 1) % 4].request_id, next_published - 1);
}

// A client that maps its segment again resumes where the shared counters
// are. The daemon's publisher never does: it starts from zero and keeps its
// own head, because the header is client-writable.
TEST_F(CompletionRingTest, NewConsumerResumesPublisherTrustsOnlyItself) {
  publisher_->Publish(Record(1));
  publisher_->Publish(Record(2));
  ASSERT_EQ(consumer_->TryPop()->record.request_id, 1u);
  RingConsumer consumer(*segment_);
  EXPECT_EQ(consumer.TryPop()->record.request_id, 2u);
  segment_->header()->ring_head.store(1000);  // a lying client
  publisher_->Publish(Record(3));
  EXPECT_EQ(publisher_->published(), 3u);
  EXPECT_EQ(segment_->header()->ring_head.load(), 3u);
  EXPECT_EQ(segment_->ring()[2].request_id, 3u);
}

TEST_F(CompletionRingTest, WakeWordMovesOnEveryPublishAndLocalWake) {
  const uint32_t before = consumer_->WakeWord();
  publisher_->Publish(Record(1));
  EXPECT_EQ(consumer_->WakeWord(), before + 1);
  consumer_->WakeLocal();
  EXPECT_EQ(consumer_->WakeWord(), before + 2);
  consumer_->BeginSleep();
  EXPECT_EQ(segment_->header()->sleepers.load(), 1u);
  consumer_->EndSleep();
  EXPECT_EQ(segment_->header()->sleepers.load(), 0u);
}

TEST_F(CompletionRingTest, RecordsCarryEveryFieldWhole) {
  CompletionRecord record{};
  record.request_id = ~uint64_t{0} - 1;
  record.status_code = -7;
  record.flags = 0x80000001u;
  record.result_offset = uint64_t{1} << 40;
  record.result_bytes = (uint64_t{1} << 33) + 3;
  record.result_dim0 = -(int64_t{1} << 35);
  record.aux_offset = (uint64_t{1} << 41) + 64;
  record.aux_count = 0xfffffffeu;
  publisher_->Publish(record);
  const auto completion = consumer_->TryPop();
  ASSERT_TRUE(completion.has_value());
  const CompletionRecord* popped = &completion->record;
  EXPECT_EQ(popped->request_id, record.request_id);
  EXPECT_EQ(popped->status_code, -7);
  EXPECT_EQ(popped->flags, 0x80000001u);
  EXPECT_EQ(popped->result_offset, record.result_offset);
  EXPECT_EQ(popped->result_bytes, record.result_bytes);
  EXPECT_EQ(popped->result_dim0, record.result_dim0);
  EXPECT_EQ(popped->aux_offset, record.aux_offset);
  EXPECT_EQ(popped->aux_count, 0xfffffffeu);
  EXPECT_EQ(popped->text_bytes, 0u) << "no text";
  EXPECT_EQ(completion->text, "");
}

// --- Text ring ---------------------------------------------------------------

// A text that says which record it belongs to, `bytes` long.
std::string TextOf(uint64_t id, size_t bytes) {
  std::string text = absl::StrCat("request ", id, " failed:");
  text.resize(bytes, static_cast<char>('a' + id % 26));
  return text;
}

TEST_F(CompletionRingTest, TextsArriveWithTheirRecordsAcrossWrapArounds) {
  uint64_t next_published = 0;
  uint64_t next_consumed = 0;
  uint64_t text_bytes = 0;
  // Batches of 1 to 4 records, every other one with a text of 1 to ~6000
  // bytes: the text ring (64 KiB) wraps many times.
  for (int round = 0; round < 200; ++round) {
    const int batch = round % 4 + 1;
    for (int i = 0; i < batch; ++i, ++next_published) {
      const uint64_t id = next_published;
      const std::string text = id % 2 == 0 ? TextOf(id, 24 + (id * 997) % 6000) : "";
      text_bytes += text.size();
      publisher_->Publish(Record(id), text);
    }
    for (int i = 0; i < batch; ++i, ++next_consumed) {
      const auto completion = consumer_->TryPop();
      ASSERT_TRUE(completion.has_value());
      const uint64_t id = next_consumed;
      EXPECT_EQ(completion->record.request_id, id);
      EXPECT_EQ(completion->text, id % 2 == 0 ? TextOf(id, 24 + (id * 997) % 6000) : "")
          << "record " << id;
      const CompletionRecord& record = completion->record;
      EXPECT_LE(record.text_position % kMinTextRingBytes + record.text_bytes, kMinTextRingBytes)
          << "a text never wraps";
    }
  }
  EXPECT_GT(text_bytes, 8 * kMinTextRingBytes) << "the text ring did not wrap often enough";
}

TEST_F(CompletionRingTest, LongTextsAreCutWithoutSplittingACharacter) {
  std::string text = "a";
  for (int i = 0; i < 10000; ++i) text += "\u00e9";  // two bytes each
  publisher_->Publish(Record(1), text);
  const auto completion = consumer_->TryPop();
  ASSERT_TRUE(completion.has_value());
  const std::string& cut = completion->text;
  ASSERT_LE(cut.size(), kMaxRecordTextBytes);
  EXPECT_GT(cut.size(), kMaxRecordTextBytes - 8);
  ASSERT_TRUE(absl::EndsWith(cut, "...")) << "the cut is marked";
  const std::string body = cut.substr(0, cut.size() - 3);
  EXPECT_TRUE(absl::StartsWith(text, body));
  EXPECT_EQ(body.size() % 2, 1u) << "'a' and whole two-byte characters only";
}

// A segment whose completion ring holds more records than the text ring
// holds texts of the largest size.
class TextRingTest : public CompletionRingTest {
 protected:
  void SetUp() override { MakeRing(64); }

  static CompletionRecord Failed(uint64_t id) {
    CompletionRecord record{};
    record.request_id = id;
    record.status_code = 3;
    return record;
  }
};

// Texts the client has not taken yet are never overwritten: later ones get
// what room is left (cut, or none), and the room returns as the client
// takes its records.
TEST_F(TextRingTest, AClientThatTakesItsTextsLateLosesOnlyTheirEnds) {
  ASSERT_EQ(segment_->text_bytes(), kMinTextRingBytes);
  constexpr size_t kText = 7000;  // nine fit in 64 KiB, with 2536 bytes left
  for (uint64_t id = 0; id < 11; ++id) publisher_->Publish(Failed(id), TextOf(id, kText));
  for (uint64_t id = 0; id < 9; ++id) {
    const auto completion = consumer_->TryPop();
    ASSERT_TRUE(completion.has_value());
    EXPECT_EQ(completion->text, TextOf(id, kText)) << "record " << id;
  }
  auto tenth = consumer_->TryPop();
  ASSERT_TRUE(tenth.has_value());
  EXPECT_EQ(tenth->text, TextOf(9, kMinTextRingBytes - 9 * kText - 3) + "...")
      << "cut to the room left";
  auto eleventh = consumer_->TryPop();
  ASSERT_TRUE(eleventh.has_value());
  EXPECT_EQ(eleventh->record.request_id, 10u);
  EXPECT_EQ(eleventh->record.status_code, 3) << "the record itself is whole";
  EXPECT_EQ(eleventh->text, "") << "no room was left";
  // Taken: the whole ring is free again, from its start.
  publisher_->Publish(Failed(11), TextOf(11, kText));
  const auto twelfth = consumer_->TryPop();
  ASSERT_TRUE(twelfth.has_value());
  EXPECT_EQ(twelfth->text, TextOf(11, kText));
  EXPECT_EQ(twelfth->record.text_position % kMinTextRingBytes, 0u);
}

// The text ring's tail and geometry in the header are client-writable: the
// daemon sizes texts by the tail but writes only inside the ring it made.
TEST_F(TextRingTest, ClientWrittenTailAndGeometryNeverMoveDaemonWritesOutOfTheRing) {
  ClientSegmentHeader* header = segment_->header();
  auto* base = reinterpret_cast<std::byte*>(header);
  const uint64_t text_begin = header->text_offset;
  const uint64_t text_end = text_begin + header->text_bytes;
  std::memset(base + text_end, 0xab, segment_->size() - text_end);
  header->text_offset = segment_->size() - 8;
  header->text_bytes = 8;
  uint64_t id = 0;
  // A tail far ahead of the daemon's head, far behind it, and one that
  // claims every text was read: texts are cut to nothing, or written inside.
  for (const uint64_t tail : {uint64_t{1} << 40, ~uint64_t{0} - (uint64_t{1} << 30), uint64_t{0}}) {
    header->text_tail.store(tail);
    for (int i = 0; i < 20; ++i, ++id) publisher_->Publish(Failed(id), TextOf(id, 6000));
    while (auto completion = consumer_->TryPop()) {
      const CompletionRecord& record = completion->record;
      EXPECT_LE(record.text_position % kMinTextRingBytes + record.text_bytes, kMinTextRingBytes);
    }
  }
  uint64_t changed = 0;
  for (uint64_t i = text_end; i < segment_->size(); ++i) changed += base[i] != std::byte{0xab};
  EXPECT_EQ(changed, 0u) << "the daemon wrote past the text ring";
}

TEST_F(CompletionRingTest, HeartbeatIsReadFromTheHeader) {
  segment_->header()->daemon_heartbeat_ns.store(123456789);
  EXPECT_EQ(consumer_->daemon_heartbeat_ns(), 123456789u);
}

// The client's wait: sleep on the wake word until a record arrives.
std::optional<Completion> WaitForRecord(RingConsumer& consumer, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const uint32_t word = consumer.WakeWord();
    if (auto record = consumer.TryPop()) return record;
    consumer.BeginSleep();
    consumer.Sleep(word, deadline - absl::Now());
    consumer.EndSleep();
  }
  return consumer.TryPop();
}

// Waits for a child through a pidfd, up to `timeout`; its wait status, or
// nullopt (the child is then killed and reaped).
std::optional<int> WaitChild(pid_t child, absl::Duration timeout) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, child, 0));
  if (pidfd < 0) return std::nullopt;
  pollfd fd{pidfd, POLLIN, 0};
  const int ready = ::poll(&fd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  ::close(pidfd);
  int status = 0;
  if (ready <= 0) ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  if (ready <= 0) return std::nullopt;
  return status;
}

TEST_F(CompletionRingTest, PublishWakesASleeperInAnotherProcess) {
  ClientSegmentHeader* header = segment_->header();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The client: its view of the same shared pages (inherited mapping).
    RingConsumer consumer(*segment_);
    const auto completion = WaitForRecord(consumer, absl::Seconds(30));
    ::_exit(!completion.has_value() ? 2 : completion->record.request_id == 77 ? 0 : 3);
  }
  // Publish once the child sleeps, so that the wake is what ends its wait
  // (a missed wake would leave it asleep past the parent's deadline).
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (header->sleepers.load() == 0 && absl::Now() < deadline) std::this_thread::yield();
  EXPECT_EQ(header->sleepers.load(), 1u) << "the child never went to sleep";
  publisher_->Publish(Record(77));
  const auto status = WaitChild(child, absl::Seconds(10));
  ASSERT_TRUE(status.has_value()) << "the child was not woken";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status;
  EXPECT_EQ(header->sleepers.load(), 0u);
}

TEST(FutexTest, WaitReturnsAtOnceWhenTheWordDiffersAndAtTheTimeoutOtherwise) {
  std::atomic<uint32_t> word{5};
  const absl::Time start = absl::Now();
  FutexWait(&word, 4, absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  const absl::Time before = absl::Now();
  FutexWait(&word, 5, absl::Milliseconds(20));
  const absl::Duration waited = absl::Now() - before;
  EXPECT_GE(waited, absl::Milliseconds(15));
  EXPECT_LT(waited, absl::Seconds(5));
}

// --- Submission ring ------------------------------------------------------------

class SubmissionRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = ClientSegment::Create(Options(UniqueName("submit")));
    ASSERT_TRUE(created.ok()) << created.status();
    segment_ = std::move(*created);
    bytes_ = segment_->submit_bytes();
    writer_ = std::make_unique<SubmissionWriter>(segment_->header(), segment_->submit_ring(),
                                                 bytes_, &doorbell_);
    reader_ =
        std::make_unique<SubmissionReader>(segment_->header(), segment_->submit_ring(), bytes_);
  }

  static std::string Payload(size_t size, char seed) {
    std::string payload(size, '\0');
    for (size_t i = 0; i < size; ++i) payload[i] = static_cast<char>(seed + i * 7);
    return payload;
  }
  bool Push(const std::string& payload) { return writer_->TryPush(payload.data(), payload.size()); }
  // The next payload, "<empty>", or "error: <message>".
  std::string Pop() {
    std::string payload;
    const absl::StatusOr<bool> next = reader_->Next(&payload);
    if (!next.ok()) return absl::StrCat("error: ", next.status().ToString());
    return *next ? payload : "<empty>";
  }

  // Writes a raw record header at the reader's next position and publishes
  // `bytes` more bytes, as a lying client would.
  void Forge(uint32_t kind, uint32_t length, uint64_t publish) {
    const uint64_t tail = segment_->header()->submit_tail.load();
    const SubmitRecordHeader header{length, kind};
    std::memcpy(segment_->submit_ring() + (tail & (bytes_ - 1)), &header, sizeof(header));
    segment_->header()->submit_head.store(tail + publish);
  }

  std::unique_ptr<ClientSegment> segment_;
  uint64_t bytes_ = 0;
  std::atomic<uint32_t> doorbell_{0};
  std::unique_ptr<SubmissionWriter> writer_;
  std::unique_ptr<SubmissionReader> reader_;
};

TEST_F(SubmissionRingTest, DeliversPayloadsInOrder) {
  EXPECT_TRUE(reader_->Empty());
  EXPECT_EQ(Pop(), "<empty>");
  ASSERT_TRUE(Push("first"));
  ASSERT_TRUE(Push(""));
  ASSERT_TRUE(Push(Payload(1001, 'a')));
  EXPECT_FALSE(reader_->Empty());
  EXPECT_EQ(Pop(), "first");
  EXPECT_EQ(Pop(), "");
  EXPECT_EQ(Pop(), Payload(1001, 'a'));
  EXPECT_EQ(Pop(), "<empty>");
  EXPECT_TRUE(reader_->Empty());
  EXPECT_EQ(segment_->header()->submit_tail.load(), segment_->header()->submit_head.load());
}

TEST_F(SubmissionRingTest, WrapsWithPaddingRecords) {
  // Records of a size that does not divide the ring: every few pushes one
  // needs a pad to the end and starts over at offset 0.
  for (int i = 0; i < 40; ++i) {
    const std::string sent = Payload(40000 + i * 8, static_cast<char>(i));
    ASSERT_TRUE(Push(sent)) << "push " << i;
    ASSERT_TRUE(Push("small")) << "push " << i;
    ASSERT_EQ(Pop(), sent) << "pop " << i;
    ASSERT_EQ(Pop(), "small") << "pop " << i;
  }
  EXPECT_GT(segment_->header()->submit_head.load(), 4 * bytes_) << "the ring wrapped";
  EXPECT_EQ(Pop(), "<empty>");
}

TEST_F(SubmissionRingTest, RefusesWhenFullOrOversized) {
  EXPECT_FALSE(writer_->TryPush(Payload(1, 'x').data(), SubmissionWriter::kMaxPayloadBytes + 1));
  const std::string largest = Payload(SubmissionWriter::kMaxPayloadBytes, 'l');
  int pushed = 0;
  while (Push(largest)) ++pushed;
  EXPECT_EQ(pushed, static_cast<int>(bytes_ / kMaxSubmitRecordBytes));
  EXPECT_EQ(Pop(), largest);
  EXPECT_TRUE(Push(largest)) << "room again after one record was consumed";
}

TEST_F(SubmissionRingTest, ReaderRefusesForgedRecords) {
  Forge(kSubmitMessage, 16, bytes_ + 8);
  EXPECT_THAT(Pop(), HasSubstr("DATA_LOSS: the submission ring claims"));
}

TEST_F(SubmissionRingTest, ReaderRefusesAnUnknownKind) {
  Forge(7, 16, 24);
  EXPECT_THAT(Pop(), HasSubstr("DATA_LOSS: a record of the submission ring is malformed (kind 7, "
                               "16 bytes)"));
}

TEST_F(SubmissionRingTest, ReaderRefusesARecordLongerThanWhatWasPublished) {
  Forge(kSubmitMessage, 1000, 16);
  EXPECT_THAT(Pop(), HasSubstr("DATA_LOSS"));
}

TEST_F(SubmissionRingTest, ReaderRefusesAnOversizedRecord) {
  Forge(kSubmitMessage, static_cast<uint32_t>(SubmissionWriter::kMaxPayloadBytes + 8), bytes_);
  EXPECT_THAT(Pop(), HasSubstr("DATA_LOSS"));
}

TEST_F(SubmissionRingTest, ReaderRefusesABadPad) {
  Forge(kSubmitPad, 8, 16);
  EXPECT_THAT(Pop(), HasSubstr("DATA_LOSS: a padding record"));
}

TEST_F(SubmissionRingTest, RingBumpsTheDaemonsWord) {
  const uint32_t before = segment_->header()->submit_word.load();
  writer_->Ring();
  EXPECT_EQ(segment_->header()->submit_word.load(), before + 1);
  EXPECT_EQ(doorbell_.load(), 0u) << "the engine is awake: the doorbell stays quiet";
}

TEST_F(SubmissionRingTest, RingRingsTheDoorbellOnlyWhenTheEngineSleepsOnIt) {
  segment_->header()->daemon_sleeping.store(kDaemonSleepsOnSubmitWord);
  writer_->Ring();
  EXPECT_EQ(doorbell_.load(), 0u);
  segment_->header()->daemon_sleeping.store(kDaemonSleepsOnDoorbell);
  writer_->Ring();
  EXPECT_EQ(doorbell_.load(), 1u);
  EXPECT_EQ(segment_->header()->submit_word.load(), 2u) << "submit_word moves on every ring";
}

// A thread waiting on the doorbell word is woken by a ring from a writer
// that maps the doorbell segment separately, as a client does.
TEST_F(SubmissionRingTest, RingWakesAWaiterOnTheDoorbellSegment) {
  auto created = DoorbellSegment::Create(
      {.name = UniqueName("doorbell"), .epoch = 7, .owner_uid = ::geteuid(), .mode = 0600});
  ASSERT_TRUE(created.ok()) << created.status();
  auto opened = DoorbellSegment::Open((*created)->name(), DoorbellSegment::kSegmentBytes, 7);
  ASSERT_TRUE(opened.ok()) << opened.status();
  SubmissionWriter writer(segment_->header(), segment_->submit_ring(), bytes_, (*opened)->word());
  segment_->header()->daemon_sleeping.store(kDaemonSleepsOnDoorbell);

  std::atomic<uint32_t>* word = (*created)->word();
  const uint32_t armed = word->load();
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (word->load() == armed && std::chrono::steady_clock::now() < deadline) {
      FutexWait(word, armed, absl::Seconds(30));
    }
    woke = word->load() != armed;
  });
  writer.Ring();
  waiter.join();
  EXPECT_TRUE(woke);
}

TEST(DoorbellSegmentTest, OpenRefusesAnotherDaemonOrSize) {
  auto created = DoorbellSegment::Create(
      {.name = UniqueName("doorbell"), .epoch = 3, .owner_uid = ::geteuid(), .mode = 0600});
  ASSERT_TRUE(created.ok()) << created.status();
  const absl::Status other_daemon =
      DoorbellSegment::Open((*created)->name(), DoorbellSegment::kSegmentBytes, 4).status();
  EXPECT_EQ(other_daemon.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other_daemon.message(), HasSubstr("does not match this daemon instance"));
  const absl::Status other_size =
      DoorbellSegment::Open((*created)->name(), 2 * DoorbellSegment::kSegmentBytes, 3).status();
  EXPECT_EQ(other_size.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other_size.message(), HasSubstr("this client expects 4096"));
  EXPECT_TRUE(DoorbellSegment::Open((*created)->name(), DoorbellSegment::kSegmentBytes, 3).ok());
}

// --- Segment names -------------------------------------------------------------------

TEST(SegmentNamesTest, NamesCarryUidSocketTagAndEpoch) {
  const SegmentNames names(1000, "/run/collectived/collectived.sock", 0x1234);
  EXPECT_THAT(names.prefix(), ::testing::MatchesRegex("collectived\\.1000\\.[0-9a-f]{8}\\."));
  EXPECT_EQ(names.Client(5), names.prefix() + "0000000000001234.c5");
  EXPECT_EQ(names.Result(2), names.prefix() + "0000000000001234.r2");
  EXPECT_EQ(names.Doorbell(2), names.prefix() + "0000000000001234.d2");
  EXPECT_NE(SegmentNames(1000, "/tmp/other.sock", 0x1234).prefix(), names.prefix());
  EXPECT_NE(SegmentNames(1001, "/run/collectived/collectived.sock", 0x1234).prefix(),
            names.prefix());
  EXPECT_EQ(SegmentNames(1000, "/run/collectived/collectived.sock", 0x9).prefix(), names.prefix());
}

TEST(SegmentNamesTest, RemoveStaleRemovesOnlyOtherEpochsOfTheSameSocket) {
  const std::string socket = absl::StrCat("/tmp/shm-test-", ::getpid(), ".sock");
  const SegmentNames old_names(::geteuid(), socket, 1);
  const SegmentNames new_names(::geteuid(), socket, 2);
  const SegmentNames other_socket(::geteuid(), socket + "x", 1);
  auto create = [](const std::string& name) { return ClientSegment::Create(Options(name)); };
  auto stale = create(old_names.Client(1));
  auto stale_result = create(old_names.Result(1));
  auto ours = create(new_names.Client(1));
  auto foreign = create(other_socket.Client(1));
  ASSERT_TRUE(stale.ok() && stale_result.ok() && ours.ok() && foreign.ok());
  EXPECT_EQ(new_names.RemoveStale(), 2);
  EXPECT_FALSE(ShmExists(old_names.Client(1)));
  EXPECT_FALSE(ShmExists(old_names.Result(1)));
  EXPECT_TRUE(ShmExists(new_names.Client(1)));
  EXPECT_TRUE(ShmExists(other_socket.Client(1)));
}

TEST(SegmentNamesTest, RemoveAllRemovesEveryEpochOfTheSocketAndNothingElse) {
  // What a daemon gone for good left: collectiverun's and the tests' cleanup.
  const std::string socket = absl::StrCat("/tmp/shm-test-all-", ::getpid(), ".sock");
  const SegmentNames first(::geteuid(), socket, 1);
  const SegmentNames second(::geteuid(), socket, 2);
  const SegmentNames other_socket(::geteuid(), socket + "x", 1);
  auto create = [](const std::string& name) { return ClientSegment::Create(Options(name)); };
  auto a = create(first.Client(1));
  auto b = create(second.Result(1));
  auto foreign = create(other_socket.Client(1));
  ASSERT_TRUE(a.ok() && b.ok() && foreign.ok());
  EXPECT_EQ(SegmentNames(::geteuid(), socket, 0).RemoveAll(), 2);
  EXPECT_FALSE(ShmExists(first.Client(1)));
  EXPECT_FALSE(ShmExists(second.Result(1)));
  EXPECT_TRUE(ShmExists(other_socket.Client(1)));
}

// --- Liveness marks ------------------------------------------------------------------

// An object in /dev/shm named `name`, as a daemon's segment would be.
void CreateObject(const std::string& name) {
  const int fd = ::open(("/dev/shm/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
  ::close(fd);
}

TEST(LivenessMarkTest, AMarkNamesTheSegmentsOfItsDaemonAndIsNoSegment) {
  const SegmentNames names(1000, "/run/collectived/collectived.sock", 0x1234);
  EXPECT_FALSE(absl::StartsWith(names.Mark(), names.prefix()));
  EXPECT_TRUE(absl::StartsWith(names.Mark(), SegmentNames::MarkPrefix(1000)));
  const std::string segments = SegmentNames::SegmentsOfMark(1000, names.Mark());
  EXPECT_EQ(segments, names.prefix() + "0000000000001234.");
  EXPECT_TRUE(absl::StartsWith(names.Client(3), segments));
  EXPECT_EQ(SegmentNames::SegmentsOfMark(1001, names.Mark()), "") << "another uid's mark";
  EXPECT_EQ(SegmentNames::SegmentsOfMark(1000, names.Mark() + ".new"), "") << "one being made";
  EXPECT_EQ(SegmentNames::SegmentsOfMark(1000, SegmentNames::MarkPrefix(1000) + "x"), "");
}

TEST(LivenessMarkTest, OnlyTheSegmentsOfADeadDaemonAreRemovedWhateverItsSocket) {
  const std::string socket = absl::StrCat("/tmp/shm-test-mark-", ::getpid(), ".sock");
  const SegmentNames dead(::geteuid(), socket, 1);
  const SegmentNames alive(::geteuid(), socket + "-alive", 2);
  const SegmentNames unmarked(::geteuid(), socket + "-old", 3);  // a daemon without a mark

  // The dead daemon: a process that holds its mark and then is killed.
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto mark = LivenessMark::Hold(dead);
    const char said = mark.ok() ? '1' : '0';
    if (::write(ready[1], &said, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char said = 0;
  ASSERT_EQ(::read(ready[0], &said, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(said, '1');
  CreateObject(dead.Client(1));
  CreateObject(dead.Result(1));

  auto hold = LivenessMark::Hold(alive);
  ASSERT_TRUE(hold.ok()) << hold.status();
  std::optional<LivenessMark> held(std::move(*hold));
  CreateObject(alive.Client(1));
  CreateObject(unmarked.Client(1));

  // Other runs may have left marks of killed daemons: count only ours.
  RemoveOrphaned(::geteuid());
  EXPECT_TRUE(ShmExists(dead.Client(1))) << "both daemons still run";
  EXPECT_TRUE(ShmExists(dead.Mark()));

  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(ShmExists(dead.Mark())) << "a killed daemon cannot remove its mark";
  RemoveOrphaned(::geteuid());
  EXPECT_FALSE(ShmExists(dead.Client(1)));
  EXPECT_FALSE(ShmExists(dead.Result(1)));
  EXPECT_FALSE(ShmExists(dead.Mark()));
  EXPECT_TRUE(ShmExists(alive.Client(1))) << "a running daemon's segments stay";
  EXPECT_TRUE(ShmExists(alive.Mark()));
  EXPECT_TRUE(ShmExists(unmarked.Client(1))) << "without a mark nobody can tell";

  held.reset();
  EXPECT_FALSE(ShmExists(alive.Mark())) << "a daemon that ends removes its mark";
  SegmentNames(::geteuid(), socket + "-alive", 0).RemoveAll();
  SegmentNames(::geteuid(), socket + "-old", 0).RemoveAll();
}

TEST(LivenessMarkTest, RemoveStaleAndRemoveAllTakeTheSocketsMarksToo) {
  const std::string socket = absl::StrCat("/tmp/shm-test-marks-", ::getpid(), ".sock");
  const SegmentNames old_names(::geteuid(), socket, 1);
  const SegmentNames new_names(::geteuid(), socket, 2);
  CreateObject(old_names.Mark());  // a dead daemon's: nobody holds it
  auto held = LivenessMark::Hold(new_names);
  ASSERT_TRUE(held.ok()) << held.status();
  new_names.RemoveStale();
  EXPECT_FALSE(ShmExists(old_names.Mark()));
  EXPECT_TRUE(ShmExists(new_names.Mark())) << "our own mark stays";
  new_names.RemoveAll();
  EXPECT_FALSE(ShmExists(new_names.Mark()));
}

}  // namespace
}  // namespace collective::shm
