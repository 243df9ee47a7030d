// What the daemon itself must catch in the collectives beyond allreduce,
// shown with raw clients (no libcollective, which refuses all of this at the
// call): alltoall splits that only the set's size can judge (a rank without
// splits whose first dimension does not divide, the wrong number of splits)
// fail on every rank; splits that are wrong on their own (negative, not
// adding up), reducescatter with min or of a scalar, a duplicate
// outstanding name and a set the rank is not in are refused to that rank
// alone, while the others wait on. After each, the same clients complete a
// correct collective.
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_client.h"

namespace collective::testing {
namespace {

// Inputs lie at the start of each arena (CheckAllreduce uses 64 KiB on).
constexpr uint64_t kInput = 0;

v1::TensorRequest Request(uint64_t id, const std::string& name, v1::Collective collective,
                          std::vector<int64_t> shape) {
  v1::TensorRequest request;
  request.set_request_id(id);
  request.set_name(name);
  request.set_collective(collective);
  request.set_dtype(v1::DATA_TYPE_FLOAT32);
  uint64_t elements = 1;
  for (int64_t dim : shape) {
    request.add_shape(dim);
    elements *= static_cast<uint64_t>(dim);
  }
  request.set_offset(kInput);
  request.set_length(elements * sizeof(float));
  if (collective == v1::COLLECTIVE_ALLREDUCE || collective == v1::COLLECTIVE_REDUCESCATTER) {
    request.set_op(v1::REDUCE_OP_SUM);
  }
  return request;
}

v1::TensorRequest Alltoall(uint64_t id, const std::string& name, int64_t rows,
                           const std::vector<int64_t>& splits) {
  v1::TensorRequest request = Request(id, name, v1::COLLECTIVE_ALLTOALL, {rows});
  for (int64_t split : splits) request.add_splits(split);
  return request;
}

// Rank r's input: r * 100 + i at element i.
void FillInput(RawClient& client, int count) {
  auto* input = reinterpret_cast<float*>(client.segment().arena() + kInput);
  for (int i = 0; i < count; ++i) input[i] = static_cast<float>(client.rank() * 100 + i);
}

class WireErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
  }

  void Join(int clients, const std::vector<std::vector<int32_t>>& static_sets = {}) {
    // Every rank registers at once (Register returns when the job formed).
    std::vector<absl::StatusOr<v1::RegisterResponse>> responses(
        clients, absl::UnknownError("not registered"));
    {
      std::vector<std::jthread> threads;
      for (int rank = 0; rank < clients; ++rank) {
        threads.emplace_back([&, rank] {
          v1::RegisterRequest request = RawRegisterRequest(rank, clients);
          for (const auto& ranks : static_sets) {
            v1::ProcessSet* set = request.add_static_process_sets();
            for (int32_t member : ranks) set->add_ranks(member);
          }
          responses[rank] = CallRegister(daemon_->socket(), request);
        });
      }
    }
    for (auto& response : responses) {
      ASSERT_TRUE(response.ok()) << response.status();
      auto client = RawClient::Attach(daemon_->socket(), std::move(*response));
      ASSERT_TRUE(client.ok()) << client.status();
      clients_.push_back(std::move(*client));
    }
  }

  void TearDown() override {
    for (auto& client : clients_) {
      const absl::Status left = client->Leave();
      EXPECT_TRUE(left.ok()) << "rank " << client->rank() << ": " << left;
    }
    clients_.clear();
    if (daemon_ != nullptr) {
      EXPECT_EQ(StopAndCheck(*daemon_), "");
    }
  }

  RawClient& rank(int r) { return *clients_[r]; }

  // The next completion of `r` must be request `id` failing with `code` and
  // `message`, which comes with the record.
  void ExpectFailure(int r, uint64_t id, absl::StatusCode code, const std::string& message) {
    const auto completion = rank(r).NextCompletion();
    ASSERT_TRUE(completion.has_value())
        << "rank " << r << ": no completion; " << rank(r).session().DescribeEnd();
    EXPECT_EQ(completion->record.request_id, id) << "rank " << r;
    EXPECT_EQ(completion->record.status_code, static_cast<int32_t>(code)) << "rank " << r;
    EXPECT_EQ(completion->text, message) << "rank " << r;
  }

  // The next completion of `r` is request `id`, successful; its result.
  std::vector<std::byte> ExpectSuccess(int r, uint64_t id, shm::CompletionRecord* out = nullptr) {
    const auto record = rank(r).NextRecord();
    EXPECT_TRUE(record.has_value()) << "rank " << r << ": no completion";
    if (!record.has_value()) return {};
    EXPECT_EQ(record->request_id, id) << "rank " << r;
    EXPECT_EQ(record->status_code, 0) << "rank " << r;
    if (out != nullptr) *out = *record;
    return rank(r).TakeResult(*record);
  }

  // The job still works.
  void ExpectAllreduce(uint64_t id) {
    std::vector<RawClient*> clients;
    for (auto& client : clients_) clients.push_back(client.get());
    EXPECT_EQ(CheckAllreduce(clients, id, absl::StrCat("after.", id)), "");
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::vector<std::unique_ptr<RawClient>> clients_;
};

TEST_F(WireErrorsTest, AlltoallWithoutSplitsThatDoNotDivideFailsOnEveryRank) {
  ASSERT_NO_FATAL_FAILURE(Join(2));
  ASSERT_TRUE(rank(0).Submit({Alltoall(1, "a2a", 3, {1, 2})}));
  ASSERT_TRUE(rank(1).Submit({Alltoall(1, "a2a", 3, {})}));
  const std::string why =
      "alltoall of 'a2a': rank 1's first dimension 3 does not divide evenly among 2 ranks; pass "
      "splits to say how many rows go to each rank";
  for (int r = 0; r < 2; ++r) ExpectFailure(r, 1, absl::StatusCode::kInvalidArgument, why);
  ExpectAllreduce(2);
}

TEST_F(WireErrorsTest, AlltoallWithTheWrongNumberOfSplitsFailsOnEveryRank) {
  ASSERT_NO_FATAL_FAILURE(Join(2));
  ASSERT_TRUE(rank(0).Submit({Alltoall(1, "a2a", 3, {1, 2})}));
  ASSERT_TRUE(rank(1).Submit({Alltoall(1, "a2a", 3, {1, 1, 1})}));
  const std::string why = "alltoall of 'a2a': rank 1 sent 3 splits for a process set of 2 ranks";
  for (int r = 0; r < 2; ++r) ExpectFailure(r, 1, absl::StatusCode::kInvalidArgument, why);
  ExpectAllreduce(2);
}

TEST_F(WireErrorsTest, BadSplitsAreRefusedToTheirRankWhileTheOthersWait) {
  ASSERT_NO_FATAL_FAILURE(Join(2));
  for (int r = 0; r < 2; ++r) FillInput(rank(r), 3);
  ASSERT_TRUE(rank(0).Submit({Alltoall(1, "a2a", 3, {1, 2})}));
  ASSERT_TRUE(rank(1).Submit({Alltoall(1, "a2a", 3, {-1, 4})}));
  ExpectFailure(1, 1, absl::StatusCode::kInvalidArgument,
                "request 1 ('a2a'): split -1 is negative");
  ASSERT_TRUE(rank(1).Submit({Alltoall(2, "a2a", 3, {1, 1})}));
  ExpectFailure(1, 2, absl::StatusCode::kInvalidArgument,
                "request 2 ('a2a'): the splits add up to 2 rows but the first dimension is 3");
  // Rank 0 still waits; rank 1's correct request completes it.
  EXPECT_TRUE(rank(0).RingEmpty());
  ASSERT_TRUE(rank(1).Submit({Alltoall(3, "a2a", 3, {2, 1})}));
  // Rank 0 sent [0 | 1, 2], rank 1 [100, 101 | 102].
  const std::vector<std::vector<float>> expected = {{0, 100, 101}, {1, 2, 102}};
  const std::vector<std::vector<int64_t>> splits = {{1, 2}, {2, 1}};
  for (int r = 0; r < 2; ++r) {
    shm::CompletionRecord record{};
    const std::vector<std::byte> bytes = ExpectSuccess(r, r == 0 ? 1 : 3, &record);
    ASSERT_EQ(bytes.size(), 3 * sizeof(float)) << "rank " << r;
    std::vector<float> got(3);
    std::memcpy(got.data(), bytes.data(), bytes.size());
    EXPECT_EQ(got, expected[r]) << "rank " << r;
    EXPECT_EQ(record.result_dim0, 3) << "rank " << r;
    ASSERT_EQ(record.aux_count, 2u) << "rank " << r;
    std::vector<int64_t> received(2);
    std::memcpy(received.data(), rank(r).results().data() + record.aux_offset, sizeof(int64_t) * 2);
    EXPECT_EQ(received, splits[r]) << "rank " << r;
  }
  ExpectAllreduce(4);
}

TEST_F(WireErrorsTest, DuplicateOutstandingNamesAreRefusedForEveryCollective) {
  ASSERT_NO_FATAL_FAILURE(Join(2));
  uint64_t id = 1;
  for (const v1::Collective collective :
       {v1::COLLECTIVE_ALLREDUCE, v1::COLLECTIVE_ALLGATHER, v1::COLLECTIVE_BROADCAST,
        v1::COLLECTIVE_ALLTOALL, v1::COLLECTIVE_REDUCESCATTER}) {
    SCOPED_TRACE(v1::Collective_Name(collective));
    const std::string name = absl::StrCat("dup.", static_cast<int>(collective));
    const uint64_t first = id++;
    const uint64_t second = id++;
    ASSERT_TRUE(rank(0).Submit({Request(first, name, collective, {4})}));
    ASSERT_TRUE(rank(0).Submit({Request(second, name, collective, {4})}));
    ExpectFailure(
        0, second, absl::StatusCode::kAlreadyExists,
        absl::StrCat("tensor '", name, "' is already outstanding on rank 0 (request ", first,
                     "); a name can be submitted again only after its collective has "
                     "completed"));
    ASSERT_TRUE(rank(1).Submit({Request(first, name, collective, {4})}));
    for (int r = 0; r < 2; ++r) ExpectSuccess(r, first);
  }
  ExpectAllreduce(id);
}

TEST_F(WireErrorsTest, ReducescatterWithMinOrOfAScalarIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Join(2));
  v1::TensorRequest min = Request(1, "rs", v1::COLLECTIVE_REDUCESCATTER, {4});
  min.set_op(v1::REDUCE_OP_MIN);
  ASSERT_TRUE(rank(0).Submit({min}));
  ExpectFailure(0, 1, absl::StatusCode::kInvalidArgument,
                "request 1 ('rs'): reducescatter supports the sum and average reduce ops, not min");
  ASSERT_TRUE(rank(0).Submit({Request(2, "rs", v1::COLLECTIVE_REDUCESCATTER, {})}));
  ExpectFailure(0, 2, absl::StatusCode::kInvalidArgument,
                "request 2 ('rs'): reducescatter needs a tensor of at least one dimension (its "
                "rows)");
  ExpectAllreduce(3);
}

TEST_F(WireErrorsTest, NonMembersAndUnknownSetsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(Join(2, {{0}}));
  v1::TensorRequest outside = Request(1, "x", v1::COLLECTIVE_ALLGATHER, {4});
  outside.set_process_set_id(1);
  ASSERT_TRUE(rank(1).Submit({outside}));
  ExpectFailure(1, 1, absl::StatusCode::kInvalidArgument,
                "request 1 ('x'): rank 1 is not a member of process set 1 [0]");
  v1::TensorRequest unknown = Request(2, "y", v1::COLLECTIVE_ALLREDUCE, {4});
  unknown.set_process_set_id(5);
  ASSERT_TRUE(rank(1).Submit({unknown}));
  ExpectFailure(1, 2, absl::StatusCode::kInvalidArgument,
                "request 2 ('y'): process set 5 does not exist");
  // Rank 0 alone is set 1: its collective completes without rank 1.
  FillInput(rank(0), 4);
  v1::TensorRequest inside = Request(1, "x", v1::COLLECTIVE_ALLGATHER, {4});
  inside.set_process_set_id(1);
  ASSERT_TRUE(rank(0).Submit({inside}));
  const std::vector<std::byte> bytes = ExpectSuccess(0, 1);
  ASSERT_EQ(bytes.size(), 4 * sizeof(float));
  std::vector<float> got(4);
  std::memcpy(got.data(), bytes.data(), bytes.size());
  EXPECT_EQ(got, (std::vector<float>{0, 1, 2, 3}));
  ExpectAllreduce(3);
}

}  // namespace
}  // namespace collective::testing
