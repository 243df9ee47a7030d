// The wire protocol under abuse: a raw client (no libcollective) registers,
// attaches and sends malformed requests (through its submission ring, the
// only way in for them), submissions on its session stream, out-of-order
// session messages and bad registrations to a real collectived. Each must be
// refused with the right code and a message that names the field and why —
// a request's in its completion record, a session's as the stream's end —
// and the daemon must keep serving: a well-formed allreduce afterwards
// completes with the right values, Status answers, and the daemon exits
// cleanly leaving nothing behind.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "shm/futex.h"
#include "shm/segment_layout.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_client.h"

namespace collective::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kArenaBytes = 1 << 20;
constexpr int kMaxOutstanding = 4;

class ProtocolTest : public ::testing::Test {
 protected:
  void StartDaemon(std::vector<std::string> extra_flags = {}) {
    std::vector<std::string> flags = {"--max-outstanding-requests", std::to_string(kMaxOutstanding),
                                      "--fusion-threshold-bytes",   "1MiB",
                                      "--result-arena-bytes",       "4MiB",
                                      "--reduce-threads",           "1"};
    flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
    auto daemon = DaemonProcess::Start({.flags = flags});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
  }

  void JoinJob(int local_size, uint64_t arena_bytes = kArenaBytes) {
    auto clients = RawClient::JoinJob(daemon_->socket(), local_size, arena_bytes);
    ASSERT_TRUE(clients.ok()) << clients.status();
    clients_ = std::move(*clients);
  }

  std::vector<RawClient*> Clients() const {
    std::vector<RawClient*> clients;
    for (const auto& client : clients_) clients.push_back(client.get());
    return clients;
  }

  void TearDown() override {
    if (daemon_ == nullptr) return;
    for (auto& client : clients_) {
      const absl::Status left = client->Leave();
      EXPECT_TRUE(left.ok()) << "rank " << client->rank() << ": " << left;
    }
    clients_.clear();
    EXPECT_EQ(StopAndCheck(*daemon_), "");
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::vector<std::unique_ptr<RawClient>> clients_;
};

// --- Malformed requests: one per field rule --------------------------------

struct MalformedCase {
  std::string label;
  std::function<void(v1::TensorRequest&)> edit;
  absl::StatusCode code;
  std::vector<std::string> expected;  // substrings of the message

  friend void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.label; }
};

std::vector<MalformedCase> MalformedCases() {
  using v1::TensorRequest;
  const auto invalid = absl::StatusCode::kInvalidArgument;
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  return {
      {"OffsetPastTheArena",
       [](TensorRequest& r) { r.set_offset(kArenaBytes); },
       invalid,
       {"offset 1048576 + length 16 lies outside the client's arena of 1048576 bytes"}},
      {"OffsetInsideButEndPastTheArena",
       [](TensorRequest& r) { r.set_offset(kArenaBytes - 8); },
       invalid,
       {"offset 1048568 + length 16 lies outside"}},
      {"OffsetPlusLengthOverflows",
       [](TensorRequest& r) { r.set_offset(std::numeric_limits<uint64_t>::max() - 7); },
       invalid,
       {"offset 18446744073709551608 + length 16 lies outside"}},
      // The daemon writes a result only into the submitting client's own
      // arena: an output past it (where another client's memory may lie in
      // the daemon's address space) is refused before anything is written.
      {"OutputPastTheArena",
       [](TensorRequest& r) { r.set_output_offset(kArenaBytes); },
       invalid,
       {"output_offset 1048576 + length 16 lies outside the client's arena of 1048576 bytes"}},
      {"OutputOffsetPlusLengthOverflows",
       [](TensorRequest& r) { r.set_output_offset(std::numeric_limits<uint64_t>::max() - 7); },
       invalid,
       {"output_offset 18446744073709551608 + length 16 lies outside"}},
      {"OutputOffsetOfAnAllgather",
       [](TensorRequest& r) {
         r.set_collective(v1::COLLECTIVE_ALLGATHER);
         r.set_op(v1::REDUCE_OP_UNSPECIFIED);
         r.set_output_offset(0);
       },
       invalid,
       {"output_offset applies only to allreduce, broadcast, reducescatter, reduce, scatter and "
        "receive, not to allgather"}},
      {"LengthDoesNotMatchShape",
       [](TensorRequest& r) { r.set_length(12); },
       invalid,
       {"length 12 does not match shape [4] of float32 (4 elements of 4 bytes)"}},
      {"ShapeBytesOverflow",
       [](TensorRequest& r) { r.set_shape(0, int64_t{1} << 62); },
       invalid,
       {"length 16 does not match shape [4611686018427387904]"}},
      {"ShapeElementsOverflow",
       [](TensorRequest& r) {
         r.clear_shape();
         r.add_shape(int64_t{1} << 40);
         r.add_shape(int64_t{1} << 40);
       },
       invalid,
       {"more elements than fit in 64 bits"}},
      {"UnknownDtype",
       [](TensorRequest& r) { r.set_dtype(static_cast<v1::DataType>(99)); },
       invalid,
       {"unknown dtype unknown(99)"}},
      {"UnspecifiedDtype",
       [](TensorRequest& r) { r.set_dtype(v1::DATA_TYPE_UNSPECIFIED); },
       invalid,
       {"unknown dtype unspecified"}},
      {"UnknownOp",
       [](TensorRequest& r) { r.set_op(static_cast<v1::ReduceOp>(42)); },
       invalid,
       {"unknown reduce op unknown(42)"}},
      {"UnspecifiedOp",
       [](TensorRequest& r) { r.set_op(v1::REDUCE_OP_UNSPECIFIED); },
       invalid,
       {"unknown reduce op unspecified"}},
      {"UnknownCollective",
       [](TensorRequest& r) { r.set_collective(static_cast<v1::Collective>(42)); },
       invalid,
       {"unknown collective unknown(42)"}},
      {"UnspecifiedCollective",
       [](TensorRequest& r) { r.set_collective(v1::COLLECTIVE_UNSPECIFIED); },
       invalid,
       {"unknown collective unspecified"}},
      {"GroupedBroadcast",
       [](TensorRequest& r) {
         r.set_collective(v1::COLLECTIVE_BROADCAST);
         r.set_op(v1::REDUCE_OP_UNSPECIFIED);
         r.set_group_id(5);
         r.set_group_size(2);
       },
       invalid,
       {"only allreduce, allgather and reducescatter can be grouped, not broadcast"}},
      {"AdasumOfIntegers",
       [](TensorRequest& r) {
         r.set_op(v1::REDUCE_OP_ADASUM);
         r.set_dtype(v1::DATA_TYPE_INT32);
       },
       invalid,
       {"reduce op adasum is not defined for int32 tensors"}},
      {"BoolWithSum",
       [](TensorRequest& r) {
         r.set_dtype(v1::DATA_TYPE_BOOL);
         r.set_length(4);
       },
       invalid,
       {"reduce op sum is not defined for bool tensors"}},
      {"BoolWithAverage",
       [](TensorRequest& r) {
         r.set_dtype(v1::DATA_TYPE_BOOL);
         r.set_op(v1::REDUCE_OP_AVERAGE);
         r.set_length(4);
       },
       invalid,
       {"reduce op average is not defined for bool tensors"}},
      {"BoolWithPrescale",
       [](TensorRequest& r) {
         r.set_dtype(v1::DATA_TYPE_BOOL);
         r.set_op(v1::REDUCE_OP_MAX);
         r.set_length(4);
         r.set_prescale(2);
       },
       invalid,
       {"prescale must be 1 for bool tensors"}},
      {"NameTooLong",
       [](TensorRequest& r) { r.set_name(std::string(1025, 'n')); },
       invalid,
       {"the tensor name has 1025 bytes; the limit is 1024", "...')"}},
      // Quoted names are cut to a prefix; the cut must not split a UTF-8
      // character, or the message is no valid proto3 string and the client
      // cannot even parse the refusal.
      {"LongUtf8NameWithAnotherError",
       [](TensorRequest& r) {
         std::string name = "a";
         for (int i = 0; i < 100; ++i) name += "\u00e9";
         r.set_name(name);
         r.set_process_set_id(3);
       },
       invalid,
       {"process set 3 does not exist"}},
      {"Utf8NameTooLong",
       [](TensorRequest& r) {
         std::string name = "a";
         for (int i = 0; i < 600; ++i) name += "\u00e9";
         r.set_name(name);
       },
       invalid,
       {"the tensor name has 1201 bytes; the limit is 1024"}},
      {"EmptyName",
       [](TensorRequest& r) { r.set_name(""); },
       invalid,
       {"the tensor name is empty"}},
      {"ControlCharacterInName",
       [](TensorRequest& r) { r.set_name("bad\nname"); },
       invalid,
       {"('bad?name')", "the tensor name contains a control character"}},
      {"DeleteCharacterInName",
       [](TensorRequest& r) { r.set_name("bad\x7f"); },
       invalid,
       {"the tensor name contains a control character"}},
      {"NegativeDimension",
       [](TensorRequest& r) {
         r.clear_shape();
         r.add_shape(2);
         r.add_shape(-3);
       },
       invalid,
       {"dimension 1 of shape [2, -3] is negative"}},
      {"TooManyDimensions",
       [](TensorRequest& r) {
         r.clear_shape();
         for (int i = 0; i < 65; ++i) r.add_shape(1);
         r.set_length(4);
       },
       invalid,
       {"the shape has 65 dimensions; the limit is 64"}},
      {"NanPrescale",
       [](TensorRequest& r) { r.set_prescale(kNan); },
       invalid,
       {"prescale nan is not a finite number"}},
      {"InfinitePrescale",
       [](TensorRequest& r) { r.set_prescale(-kInf); },
       invalid,
       {"prescale -inf is not a finite number"}},
      {"InfinitePostscale",
       [](TensorRequest& r) { r.set_postscale(kInf); },
       invalid,
       {"postscale inf is not a finite number"}},
      {"NonZeroProcessSet",
       [](TensorRequest& r) { r.set_process_set_id(3); },
       invalid,
       {"process set 3 does not exist"}},
      {"SplitsOnAllreduce",
       [](TensorRequest& r) { r.add_splits(2); },
       invalid,
       {"splits apply only to alltoall"}},
      {"GroupSizeZero",
       [](TensorRequest& r) {
         r.set_group_id(5);
         r.set_group_size(0);
       },
       invalid,
       {"group size 0 is outside [1, 65536]"}},
      {"SplitsThatWrap",
       [](TensorRequest& r) {
         r.set_collective(v1::COLLECTIVE_ALLTOALL);
         r.set_op(v1::REDUCE_OP_UNSPECIFIED);
         const int64_t max = std::numeric_limits<int64_t>::max();
         for (int64_t split : {max, max, int64_t{6}}) r.add_splits(split);
       },
       invalid,
       {"split 9223372036854775807 exceeds the first dimension 4"}},
  };
}

class MalformedRequestTest : public ProtocolTest,
                             public ::testing::WithParamInterface<MalformedCase> {};

TEST_P(MalformedRequestTest, IsRefusedByItsRecordAndTheDaemonCarriesOn) {
  const MalformedCase& param = GetParam();
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  RawClient& rank0 = *clients_[0];

  constexpr uint64_t kId = 4242;
  v1::TensorRequest request = FloatAllreduce(kId, "bad", 0, 4);
  param.edit(request);
  ASSERT_TRUE(rank0.Submit({request}));

  const auto completion = rank0.NextCompletion();
  ASSERT_TRUE(completion.has_value()) << "no completion record; " << rank0.session().DescribeEnd();
  EXPECT_EQ(completion->record.request_id, kId);
  EXPECT_EQ(completion->record.status_code, static_cast<int32_t>(param.code));
  EXPECT_EQ(completion->record.result_bytes, 0u);
  EXPECT_THAT(completion->text, StartsWith(absl::StrCat("request ", kId, " (")));
  for (const std::string& expected : param.expected) {
    EXPECT_THAT(completion->text, HasSubstr(expected));
  }

  // Rank 1 heard nothing of it, and the job goes on.
  EXPECT_TRUE(clients_[1]->RingEmpty());
  EXPECT_EQ(CheckAllreduce(Clients(), 1, "after"), "");
  auto status = daemon_->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->job().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(status->totals().errors(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Fields, MalformedRequestTest, ::testing::ValuesIn(MalformedCases()),
                         [](const auto& param_info) { return param_info.param.label; });

// --- Request ids, names and limits -----------------------------------------

// Expects the next record of `client` to refuse a submission that reused
// request id `id`, without touching the request in flight with that id.
void ExpectDuplicateIdRefused(RawClient& client, uint64_t id) {
  const auto refusal = client.NextCompletion();
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->record.request_id, id);
  EXPECT_EQ(refusal->record.flags, shm::kRecordRefusedDuplicateId);
  EXPECT_EQ(refusal->record.status_code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(refusal->text, HasSubstr(absl::StrCat("request id ", id, " is already in use")));
}

TEST_F(ProtocolTest, ReusedRequestIdWhileOutstandingIsRefusedByAFlaggedRecord) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  RawClient& rank0 = *clients_[0];
  RawClient& rank1 = *clients_[1];

  ASSERT_TRUE(rank0.Submit({FloatAllreduce(7, "first", 0, 4)}));
  ASSERT_TRUE(rank0.Submit({FloatAllreduce(7, "second", 64, 4)}));
  // The refusal's record says it refuses only the second submission; the
  // next record is the first request's own, and it succeeds.
  ASSERT_NO_FATAL_FAILURE(ExpectDuplicateIdRefused(rank0, 7));
  ASSERT_TRUE(rank1.Submit({FloatAllreduce(7, "first", 0, 4)}));
  for (RawClient* client : Clients()) {
    const auto record = client->NextRecord();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->request_id, 7u);
    EXPECT_EQ(record->flags, 0u);
    EXPECT_EQ(record->status_code, 0);
    // The id stays taken while its result is held (not yet released).
  }
  ASSERT_TRUE(rank0.Submit({FloatAllreduce(7, "third", 0, 4)}));
  ASSERT_NO_FATAL_FAILURE(ExpectDuplicateIdRefused(rank0, 7));
  EXPECT_EQ(CheckAllreduce(Clients(), 8, "after"), "");
}

TEST_F(ProtocolTest, DuplicateOutstandingNameOnOneRankIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  RawClient& rank0 = *clients_[0];
  RawClient& rank1 = *clients_[1];
  auto* input0 = reinterpret_cast<float*>(rank0.segment().arena());
  auto* input1 = reinterpret_cast<float*>(rank1.segment().arena());
  for (int i = 0; i < 4; ++i) {
    input0[i] = 1.0f + static_cast<float>(i);
    input1[i] = 10.0f;
  }

  ASSERT_TRUE(rank0.Submit({FloatAllreduce(1, "x", 0, 4)}));
  ASSERT_TRUE(rank0.Submit({FloatAllreduce(2, "x", 0, 4)}));
  const auto refusal = rank0.NextCompletion();
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->record.request_id, 2u);
  EXPECT_EQ(refusal->record.status_code, static_cast<int32_t>(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(refusal->text, HasSubstr("tensor 'x' is already outstanding on rank 0 (request 1)"));

  // The first "x" is intact: rank 1's submission completes it.
  ASSERT_TRUE(rank1.Submit({FloatAllreduce(1, "x", 0, 4)}));
  for (RawClient* client : Clients()) {
    const auto record = client->NextRecord();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->request_id, 1u);
    ASSERT_EQ(record->status_code, 0);
    const std::vector<std::byte> bytes = client->TakeResult(*record);
    ASSERT_EQ(bytes.size(), 16u);
    float result[4];
    std::memcpy(result, bytes.data(), sizeof(result));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(result[i], 11.0f + static_cast<float>(i));
  }
  EXPECT_EQ(CheckAllreduce(Clients(), 3, "after"), "");
}

TEST_F(ProtocolTest, TooManyOutstandingRequestsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  RawClient& rank0 = *clients_[0];
  RawClient& rank1 = *clients_[1];

  std::vector<v1::TensorRequest> requests;
  for (int i = 0; i <= kMaxOutstanding; ++i) {
    requests.push_back(FloatAllreduce(100 + i, absl::StrCat("t", i), 64 * i, 4));
  }
  ASSERT_TRUE(rank0.Submit(requests));
  const auto refusal = rank0.NextCompletion();
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->record.request_id, 100u + kMaxOutstanding);
  EXPECT_EQ(refusal->record.status_code,
            static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(refusal->text,
              HasSubstr("4 requests are outstanding; the limit is 4 (max_outstanding_requests)"));

  // The four within the limit complete once rank 1 submits them too.
  requests.pop_back();
  ASSERT_TRUE(rank1.Submit(requests));
  for (RawClient* client : Clients()) {
    for (int i = 0; i < kMaxOutstanding; ++i) {
      const auto record = client->NextRecord();
      ASSERT_TRUE(record.has_value()) << "rank " << client->rank() << " request " << i;
      EXPECT_EQ(record->status_code, 0);
      client->TakeResult(*record);
    }
  }
  EXPECT_EQ(CheckAllreduce(Clients(), 1, "after"), "");
}

// --- Result space ------------------------------------------------------------

// Fills `count` floats of every client's arena at `offset` with rank + 1.
void FillInputs(const std::vector<RawClient*>& clients, uint64_t offset, int64_t count) {
  for (RawClient* client : clients) {
    auto* input = reinterpret_cast<float*>(client->segment().arena() + offset);
    for (int64_t i = 0; i < count; ++i) input[i] = static_cast<float>(client->rank() + 1);
  }
}

TEST_F(ProtocolTest, TensorLargerThanTheResultArenaFailsForEveryRank) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2, 8 << 20));
  constexpr int64_t kCount = (5 << 20) / 4;
  for (RawClient* client : Clients()) {
    ASSERT_TRUE(client->Submit({FloatAllreduce(1, "huge", 0, kCount)}));
  }
  for (RawClient* client : Clients()) {
    const auto failed = client->NextCompletion();
    ASSERT_TRUE(failed.has_value()) << client->session().DescribeEnd();
    EXPECT_EQ(failed->record.status_code,
              static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
    EXPECT_THAT(failed->text,
                HasSubstr("the result of 'huge' needs 5242880 bytes but the job's result arena "
                          "has 4194304"));
  }
  EXPECT_EQ(CheckAllreduce(Clients(), 2, "after"), "");
}

TEST_F(ProtocolTest, ResultsInArenaOutputsAreWrittenThereAndHoldNoResultSpace) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  constexpr int64_t kCount = 1000;
  constexpr uint64_t kOutput = 512 << 10;
  FillInputs(Clients(), 0, kCount);
  // Rank 0 reduces in place; rank 1 into another range of its arena.
  for (RawClient* client : Clients()) {
    v1::TensorRequest request = FloatAllreduce(1, "w", 0, kCount);
    request.set_output_offset(client->rank() == 0 ? 0 : kOutput);
    std::memset(client->segment().arena() + kOutput, 0, kCount * 4);
    ASSERT_TRUE(client->Submit({request}));
  }
  for (RawClient* client : Clients()) {
    const auto record = client->NextRecord();
    ASSERT_TRUE(record.has_value()) << client->session().DescribeEnd();
    ASSERT_EQ(record->status_code, 0);
    EXPECT_EQ(record->flags, shm::kRecordResultInOutput);
    EXPECT_EQ(record->result_bytes, uint64_t{kCount} * 4);
    const std::byte* output = client->segment().arena() + (client->rank() == 0 ? 0 : kOutput);
    for (int64_t i = 0; i < kCount; ++i) {
      float value;
      std::memcpy(&value, output + i * 4, 4);
      ASSERT_EQ(value, 3.0f) << "rank " << client->rank() << " element " << i;
    }
  }
  // Nothing to release: the result segment holds nothing for them.
  auto status = daemon_->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->result_arena_used_bytes(), 0u);
  EXPECT_EQ(CheckAllreduce(Clients(), 2, "after"), "");
}

TEST_F(ProtocolTest, ResultsWaitForSpaceUntilEarlierResultsAreReleased) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2, 8 << 20));
  // 3 MiB of the 4 MiB result arena stay held until released.
  constexpr int64_t kFirst = (3 << 20) / 4;
  constexpr int64_t kSecond = (2 << 20) / 4;
  FillInputs(Clients(), 0, kFirst);
  for (RawClient* client : Clients()) {
    ASSERT_TRUE(client->Submit({FloatAllreduce(1, "first", 0, kFirst)}));
  }
  std::vector<shm::CompletionRecord> held;
  for (RawClient* client : Clients()) {
    const auto record = client->NextRecord();
    ASSERT_TRUE(record.has_value());
    ASSERT_EQ(record->status_code, 0);
    held.push_back(*record);
  }
  for (RawClient* client : Clients()) {
    ASSERT_TRUE(client->Submit({FloatAllreduce(2, "second", 4 << 20, kSecond)}));
  }
  auto status = daemon_->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->result_arena_used_bytes(), 3u << 20);
  // Nothing can complete "second" while "first" is held.
  EXPECT_FALSE(clients_[0]->NextRecord(absl::Milliseconds(100)).has_value());
  for (size_t r = 0; r < clients_.size(); ++r) {
    const std::vector<std::byte> result = clients_[r]->TakeResult(held[r]);
    ASSERT_EQ(result.size(), static_cast<size_t>(kFirst) * 4);
    float last;
    std::memcpy(&last, result.data() + result.size() - 4, 4);
    EXPECT_EQ(last, 3.0f);
    ASSERT_TRUE(clients_[r]->Send({}));  // carries the release
  }
  for (RawClient* client : Clients()) {
    const auto record = client->NextRecord();
    ASSERT_TRUE(record.has_value()) << "'second' never ran after the release";
    EXPECT_EQ(record->request_id, 2u);
    EXPECT_EQ(record->status_code, 0);
    client->TakeResult(*record);
  }
  EXPECT_EQ(CheckAllreduce(Clients(), 3, "after"), "");
}

// --- Session protocol --------------------------------------------------------

void ExpectStreamEnds(RawSession& session, grpc::StatusCode code, const std::string& text) {
  const auto end = session.AwaitEnd();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->error_code(), code) << end->error_message();
  EXPECT_THAT(end->error_message(), HasSubstr(text));
}

TEST_F(ProtocolTest, FirstSessionMessageMustBeAttach) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  {
    // No job at all.
    RawSession session(daemon_->socket());
    v1::ClientMessage message;
    *message.mutable_submit()->add_requests() = FloatAllreduce(1, "x", 0, 4);
    ASSERT_TRUE(session.Write(message));
    ExpectStreamEnds(session, grpc::StatusCode::FAILED_PRECONDITION,
                     "the first message of a session must attach");
  }
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  {
    // A running job: a submission, a leave, or bare releases before attach.
    v1::ClientMessage submit;
    *submit.mutable_submit()->add_requests() = FloatAllreduce(1, "x", 0, 4);
    v1::ClientMessage leave;
    leave.mutable_leave();
    v1::ClientMessage release;
    release.add_released(1);
    for (const v1::ClientMessage& message : {submit, leave, release}) {
      RawSession session(daemon_->socket());
      ASSERT_TRUE(session.Write(message));
      ExpectStreamEnds(session, grpc::StatusCode::FAILED_PRECONDITION,
                       "the first message of a session must attach");
    }
  }
  EXPECT_EQ(CheckAllreduce(Clients(), 1, "after"), "");
}

TEST_F(ProtocolTest, AttachWithWrongTokenOrUnknownClientIsDenied) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  auto responses = RegisterJob(daemon_->socket(), 2, kArenaBytes);
  ASSERT_TRUE(responses.ok()) << responses.status();
  {
    RawSession session(daemon_->socket());
    ASSERT_TRUE(session.SendAttach((*responses)[0].client_id(), "not the token"));
    ExpectStreamEnds(session, grpc::StatusCode::PERMISSION_DENIED, "wrong session token");
  }
  {
    // Rank 1's token does not open rank 0's session.
    RawSession session(daemon_->socket());
    ASSERT_TRUE(session.SendAttach((*responses)[0].client_id(), (*responses)[1].session_token()));
    ExpectStreamEnds(session, grpc::StatusCode::PERMISSION_DENIED, "wrong session token");
  }
  {
    RawSession session(daemon_->socket());
    ASSERT_TRUE(session.SendAttach(999999, (*responses)[0].session_token()));
    ExpectStreamEnds(session, grpc::StatusCode::PERMISSION_DENIED, "unknown client id");
  }
  // The refusals did not use up the real attaches.
  for (auto& response : *responses) {
    auto client = RawClient::Attach(daemon_->socket(), response);
    ASSERT_TRUE(client.ok()) << client.status();
    clients_.push_back(std::move(*client));
  }
  EXPECT_EQ(CheckAllreduce(Clients(), 1, "after"), "");
}

TEST_F(ProtocolTest, SecondAttachForTheSameClientIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  const v1::RegisterResponse& registration = clients_[0]->registration();
  RawSession second(daemon_->socket());
  ASSERT_TRUE(second.SendAttach(registration.client_id(), registration.session_token()));
  ExpectStreamEnds(second, grpc::StatusCode::ALREADY_EXISTS,
                   absl::StrCat("client ", registration.client_id(), " already has"));
  // The first session is untouched.
  EXPECT_EQ(CheckAllreduce(Clients(), 1, "after"), "");
}

TEST_F(ProtocolTest, ASessionThatBreaksWithoutLeaveFailsTheJobForTheOthers) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  ASSERT_TRUE(clients_[1]->Submit({FloatAllreduce(1, "pending", 0, 4)}));
  clients_[0]->session().Cancel();  // as a client that dies would
  const std::string why =
      absl::StrCat("rank 0 (pid ", ::getpid(), ") disconnected from collectived without leaving");
  const auto failed = clients_[1]->NextCompletion();
  ASSERT_TRUE(failed.has_value()) << clients_[1]->session().DescribeEnd();
  EXPECT_EQ(failed->record.request_id, 1u);
  EXPECT_EQ(failed->record.status_code, static_cast<int32_t>(absl::StatusCode::kAborted));
  EXPECT_THAT(failed->text, HasSubstr(why));
  const auto job_failed = clients_[1]->session().NextOf(v1::DaemonMessage::kJobFailed);
  ASSERT_TRUE(job_failed.has_value());
  EXPECT_THAT(job_failed->job_failed().message(), HasSubstr(why));

  EXPECT_TRUE(clients_[1]->Leave().ok());
  clients_.clear();
  const auto idle = daemon_->AwaitStatus(
      [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; },
      absl::Seconds(10));
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_TRUE(daemon_->Segments().empty());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  EXPECT_EQ(CheckAllreduce(Clients(), 2, "after"), "");
}

// --- Registration ------------------------------------------------------------

TEST_F(ProtocolTest, BadRegistrationsAreRefusedClearly) {
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({"--max-arena-bytes", "2MiB", "--default-arena-bytes", "1MiB"}));
  struct Case {
    std::string label;
    std::function<void(v1::RegisterRequest&)> edit;
    absl::StatusCode code;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"local rank = local size", [](auto& r) { r.set_local_rank(2); },
       absl::StatusCode::kInvalidArgument, "local_rank 2 is outside [0, local_size 2)"},
      {"negative local rank", [](auto& r) { r.set_local_rank(-1); },
       absl::StatusCode::kInvalidArgument, "local_rank -1 is outside [0, local_size 2)"},
      {"local size 0",
       [](auto& r) {
         r.set_local_rank(0);
         r.set_local_size(0);
       },
       absl::StatusCode::kInvalidArgument, "local_size 0 is outside [1, "},
      {"wrong layout version", [](auto& r) { r.set_layout_version(99); },
       absl::StatusCode::kFailedPrecondition,
       absl::StrCat("the client speaks shared-memory layout version 99 but this daemon speaks "
                    "version ",
                    shm::kLayoutVersion)},
      {"arena above the maximum", [](auto& r) { r.set_arena_bytes(4 << 20); },
       absl::StatusCode::kInvalidArgument,
       "an arena of 4194304 bytes exceeds max_arena_bytes (2097152)"},
      {"control character in the job id", [](auto& r) { r.set_job_id("job\x01"); },
       absl::StatusCode::kInvalidArgument, "printable bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    v1::RegisterRequest request = RawRegisterRequest(0, 2, kArenaBytes);
    c.edit(request);
    const auto response = CallRegister(daemon_->socket(), request);
    ASSERT_FALSE(response.ok());
    EXPECT_EQ(response.status().code(), c.code) << response.status();
    EXPECT_THAT(std::string(response.status().message()), HasSubstr(c.expected));
  }
  // None of them started a job, and a proper one forms and runs.
  auto status = daemon_->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->job().state(), v1::JOB_STATE_IDLE);
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  EXPECT_EQ(CheckAllreduce(Clients(), 1, "after"), "");
}

TEST_F(ProtocolTest, AbandonedRegistrationLeavesTheDaemonIdle) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // Rank 0 of 2 gives up waiting for rank 1: its call is cancelled.
  const auto response =
      CallRegister(daemon_->socket(), RawRegisterRequest(0, 2), absl::Milliseconds(200));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded);
  const auto idle = daemon_->AwaitStatus(
      [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; },
      absl::Seconds(10));
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_TRUE(daemon_->Segments().empty()) << "the abandoned rank's segment is removed";
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  EXPECT_EQ(CheckAllreduce(Clients(), 1, "after"), "");
}

// --- The submission ring ---------------------------------------------------------

// The session stream carries attach and leave only: a client that sends a
// submission, a release or a CUDA registration on it is told where they go
// (INVALID_ARGUMENT ends its session), and its job fails with the same text
// for every rank; none of it is acted on. The daemon serves the next job.
TEST_F(ProtocolTest, SubmissionsReleasesAndRegistrationsOnTheStreamAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  v1::ClientMessage submit;
  *submit.mutable_submit()->add_requests() = FloatAllreduce(1, "x", 0, 4);
  v1::ClientMessage release;
  release.add_released(1);
  v1::ClientMessage cuda;
  cuda.mutable_cuda()->set_registration_id(3);
  uint64_t next_id = 1;
  for (const v1::ClientMessage& message : {submit, release, cuda}) {
    SCOPED_TRACE(message.ShortDebugString());
    ASSERT_NO_FATAL_FAILURE(JoinJob(2));
    RawClient& rank0 = *clients_[0];
    RawClient& rank1 = *clients_[1];
    const uint64_t pending = next_id++;
    ASSERT_TRUE(rank1.Submit({FloatAllreduce(pending, "pending", 0, 4)}));
    ASSERT_TRUE(rank0.session().Write(message));
    const std::string why = absl::StrCat(
        "rank 0 (pid ", ::getpid(),
        ") sent submissions, releases or CUDA registrations on its session stream; they go "
        "through the submission ring in the client's shared-memory segment, and the stream "
        "carries only attach and leave");
    ASSERT_NO_FATAL_FAILURE(
        ExpectStreamEnds(rank0.session(), grpc::StatusCode::INVALID_ARGUMENT, why));
    const auto failed = rank1.NextCompletion();
    ASSERT_TRUE(failed.has_value());
    EXPECT_EQ(failed->record.request_id, pending);
    EXPECT_EQ(failed->record.status_code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(failed->text, HasSubstr(why));
    EXPECT_TRUE(rank0.RingEmpty()) << "the stream's submission was not run";
    EXPECT_FALSE(rank0.session()
                     .NextOf(v1::DaemonMessage::kCudaRegistered, absl::ZeroDuration())
                     .has_value())
        << "the stream's registration was not answered";
    EXPECT_TRUE(rank1.Leave().ok());
    clients_.clear();
    const auto idle = daemon_->AwaitStatus(
        [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; },
        absl::Seconds(10));
    ASSERT_TRUE(idle.ok()) << idle.status();
  }
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  EXPECT_EQ(CheckAllreduce(Clients(), 1, "after"), "");
}

struct ForgedRecord {
  std::string label;
  uint32_t kind;
  std::string payload;
  absl::StatusCode code;
  std::string expected;  // what follows "rank 0 (pid N)"

  friend void PrintTo(const ForgedRecord& r, std::ostream* os) { *os << r.label; }
};

class ForgedSubmissionTest : public ProtocolTest,
                             public ::testing::WithParamInterface<ForgedRecord> {};

// The submission ring is client-writable memory: a record the daemon cannot
// trust ends the client's session and fails the job (its requests are lost),
// with DATA_LOSS for every rank when the ring's framing broke and
// INVALID_ARGUMENT when a well-framed record holds no submission — and
// nothing worse.
TEST_P(ForgedSubmissionTest, FailsTheJobNotTheDaemon) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  RawClient& rank0 = *clients_[0];
  RawClient& rank1 = *clients_[1];
  ASSERT_TRUE(rank1.Submit({FloatAllreduce(3, "pending", 0, 4)}));

  shm::ClientSegmentHeader* header = rank0.segment().header();
  const shm::SubmitRecordHeader record{static_cast<uint32_t>(GetParam().payload.size()),
                                       GetParam().kind};
  std::byte* slot = rank0.segment().submit_ring();
  std::memcpy(slot, &record, sizeof(record));
  std::memcpy(slot + sizeof(record), GetParam().payload.data(), GetParam().payload.size());
  header->submit_head.store(sizeof(record) + shm::RoundUp(GetParam().payload.size(), 8));
  header->submit_word.fetch_add(1);
  shm::FutexWakeAll(&header->submit_word);

  const std::string why = absl::StrCat("rank 0 (pid ", ::getpid(), ")", GetParam().expected);
  const auto failed = rank1.NextCompletion();
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->record.request_id, 3u);
  EXPECT_EQ(failed->record.status_code, static_cast<int32_t>(GetParam().code));
  EXPECT_THAT(failed->text, HasSubstr(why));
  const auto job_failed = rank1.session().NextOf(v1::DaemonMessage::kJobFailed);
  ASSERT_TRUE(job_failed.has_value());
  EXPECT_THAT(job_failed->job_failed().message(), HasSubstr(why));
  const auto end = rank0.session().AwaitEnd();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->error_code(), static_cast<grpc::StatusCode>(GetParam().code));
  EXPECT_THAT(end->error_message(), HasSubstr(why));

  // The job ends when the survivor leaves; the next one runs.
  EXPECT_TRUE(rank1.Leave().ok());
  clients_.clear();
  ASSERT_TRUE(
      daemon_
          ->AwaitStatus(
              [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; },
              absl::Seconds(10))
          .ok());
  ASSERT_NO_FATAL_FAILURE(JoinJob(2));
  EXPECT_EQ(CheckAllreduce(Clients(), 1, "after"), "");
}

std::string AttachMessage() {
  v1::ClientMessage message;
  message.mutable_attach()->set_client_id(1);
  return message.SerializeAsString();
}

std::string LeaveMessage() {
  v1::ClientMessage message;
  message.mutable_leave();
  return message.SerializeAsString();
}

constexpr char kSessionMessageInRing[] =
    " sent attach or leave through its submission ring; they go on the session stream, and the "
    "ring carries only submissions, releases and CUDA registrations; the job cannot continue";

INSTANTIATE_TEST_SUITE_P(
    Records, ForgedSubmissionTest,
    ::testing::Values(
        ForgedRecord{"UnknownKind", 7, std::string(16, 'x'), absl::StatusCode::kDataLoss,
                     " corrupted its submission ring (a record of the submission ring is "
                     "malformed (kind 7, 16 bytes)); the job cannot continue"},
        ForgedRecord{"NotAProtobuf", shm::kSubmitMessage, std::string(16, '\xff'),
                     absl::StatusCode::kInvalidArgument,
                     " sent a submission of 16 bytes that could not be parsed as a "
                     "ClientMessage; the job cannot continue"},
        ForgedRecord{"Attach", shm::kSubmitMessage, AttachMessage(),
                     absl::StatusCode::kInvalidArgument, kSessionMessageInRing},
        ForgedRecord{"Leave", shm::kSubmitMessage, LeaveMessage(),
                     absl::StatusCode::kInvalidArgument, kSessionMessageInRing}),
    [](const auto& param_info) { return param_info.param.label; });

// --- The header is client-writable memory -----------------------------------

// The daemon must take the rings' geometry from its own records, never from
// the header a client can scribble on: a client that zeroes ring_capacity
// and moves the text ring must not steer the daemon's record or text writes
// out of their rings (into its submission ring or arena, or past the end of
// its segment).
TEST_F(ProtocolTest, ClientWrittenRingGeometryDoesNotMoveDaemonWrites) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(JoinJob(1, 4096));
  RawClient& client = *clients_[0];
  shm::ClientSegmentHeader* header = client.segment().header();
  // Everything after the text ring (the submission ring and the arena) is
  // the client's to write; the daemon only reads it.
  const uint64_t text_end = header->text_offset + header->text_bytes;
  const uint64_t size = client.segment().size();
  auto* base = reinterpret_cast<std::byte*>(header);
  std::memset(base + text_end, 0xab, size - text_end);
  header->ring_capacity = 0;
  header->text_offset = size - 8;
  header->text_bytes = 8;

  // Enough refusals (empty names), each with its text, that a record index
  // taken from the client's value walks out of the ring.
  constexpr int kRequests = 200;
  std::vector<v1::TensorRequest> requests;
  for (int i = 0; i < kRequests; ++i) requests.push_back(FloatAllreduce(1000 + i, "", 0, 4));
  ASSERT_TRUE(client.Submit(requests));
  // What the client wrote there itself; the daemon must leave it so.
  const std::vector<std::byte> expected(base + text_end, base + size);
  const auto refused = daemon_->AwaitStatus(
      [](const v1::StatusResponse& s) { return s.totals().errors() == uint64_t{kRequests}; },
      absl::Seconds(10));
  ASSERT_TRUE(refused.ok()) << refused.status();
  uint64_t first_changed = 0;
  uint64_t changed = 0;
  for (uint64_t i = text_end; i < size; ++i) {
    if (base[i] != expected[i - text_end] && changed++ == 0) first_changed = i;
  }
  EXPECT_EQ(changed, 0u) << "the daemon wrote " << changed
                         << " bytes past the text ring, the first at segment offset "
                         << first_changed;
  // The rings are unusable for this client now (its own doing); leave
  // without reading them.
}

}  // namespace
}  // namespace collective::testing
