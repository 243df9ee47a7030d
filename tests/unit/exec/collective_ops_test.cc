// daemon/ops: each data collective's Check, slot size, work and per-rank
// result, run on real client segments (shm::ClientSegment, unlinked at once)
// the way the executor runs them: Check, SlotBytes, AddWork into a slot,
// every piece of the WorkList, then ResultOf for every rank.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "daemon/exec/ops/collective_op.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/phases.h"
#include "shm/client_segment.h"
#include "shm/segment_layout.h"
#include "tests/unit/exec/test_clients.h"

namespace collective::daemon::exec::ops {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr uint64_t kArenaBytes = 64 << 10;
// Slots are filled with this first, so that a byte the work did not write
// shows.
constexpr std::byte kUntouched{0xab};

class CollectiveOpsTest : public ::testing::Test {
 protected:
  CollectiveOpsTest() : zeros_(kPieceBytes) {}

  // A tensor of `collective` in process set `set_id` of `set_size` ranks;
  // the global rank of set rank r is 10 + r, so that messages must name
  // global ranks.
  negotiation::ReadyTensor Tensor(v1::Collective collective, int32_t set_size, int32_t set_id = 0) {
    while (static_cast<int32_t>(clients_.size()) < set_size) {
      clients_.push_back(NewTestClient(10 + static_cast<int32_t>(clients_.size()), arena_bytes_));
      if (clients_.back() == nullptr) ADD_FAILURE() << "no segment";
    }
    negotiation::ReadyTensor tensor;
    tensor.name = "w";
    tensor.process_set_id = set_id;
    tensor.set_size = set_size;
    collective_ = collective;
    return tensor;
  }

  // Adds set rank `set_rank`'s submission: a `dtype` tensor of `shape` whose
  // elements are `values` (written to its arena at offset 64).
  template <class T>
  void Submit(negotiation::ReadyTensor& tensor, int32_t set_rank, v1::DataType dtype,
              const std::vector<int64_t>& shape, const std::vector<T>& values,
              const std::function<void(v1::TensorRequest&)>& edit = {}) {
    ASSERT_EQ(sizeof(T), ElementSize(dtype));
    job::ClientRecord* client = clients_[set_rank].get();
    ASSERT_NE(client, nullptr);
    const uint64_t bytes = values.size() * sizeof(T);
    ASSERT_LE(64 + bytes, client->segment->arena_bytes());
    if (bytes > 0) std::memcpy(client->segment->arena() + 64, values.data(), bytes);
    negotiation::Submission submission;
    submission.client = client;
    submission.rank = submission.client->topology.rank();
    submission.set_rank = set_rank;
    v1::TensorRequest& request = submission.request;
    request.set_request_id(100 + set_rank);
    request.set_name(tensor.name);
    request.set_collective(collective_);
    request.set_op(v1::REDUCE_OP_SUM);
    request.set_dtype(dtype);
    for (int64_t dim : shape) request.add_shape(dim);
    request.set_offset(64);
    request.set_length(bytes);
    request.set_process_set_id(tensor.process_set_id);
    if (edit) edit(request);
    tensor.submissions.push_back(std::move(submission));
  }

  // Runs the op as the executor does; the slot is left in slot_.
  void Run(const negotiation::ReadyTensor& tensor) {
    const CollectiveOp* op = OpFor(tensor.request());
    ASSERT_NE(op, nullptr);
    ASSERT_TRUE(op->Check(tensor).ok()) << op->Check(tensor);
    const uint64_t bytes = op->SlotBytes(tensor);
    EXPECT_EQ(bytes % shm::kDataAlignment, 0u) << "slots keep the next one aligned";
    // The slot starts on a cache line, as in the result segment; a tail
    // after it must stay untouched.
    slot_storage_.assign(bytes + 2 * shm::kDataAlignment, kUntouched);
    const auto address = reinterpret_cast<uintptr_t>(slot_storage_.data());
    slot_ = slot_storage_.data() + (shm::RoundUp(address, shm::kDataAlignment) - address);
    slot_bytes_ = bytes;
    WorkList work(zeros_.data());
    op->AddWork(tensor, slot_, work);
    for (size_t i = work.size(); i-- > 0;) work.Run(i);
    for (const std::byte* tail = slot_ + bytes; tail < slot_ + bytes + shm::kDataAlignment;
         ++tail) {
      ASSERT_EQ(*tail, kUntouched) << "the work wrote past the slot";
    }
  }

  // The elements of submissions[index]'s result.
  template <class T>
  std::vector<T> ResultOf(const negotiation::ReadyTensor& tensor, size_t index) {
    const RankResult result = OpFor(tensor.request())->ResultOf(tensor, index);
    EXPECT_EQ(result.bytes % sizeof(T), 0u);
    EXPECT_LE(result.offset + result.bytes, slot_bytes_) << "the result lies in the slot";
    std::vector<T> values(result.bytes / sizeof(T));
    if (!values.empty()) std::memcpy(values.data(), slot_ + result.offset, result.bytes);
    return values;
  }

  // The received-splits array of submissions[index]'s result.
  std::vector<int64_t> AuxOf(const negotiation::ReadyTensor& tensor, size_t index) {
    const RankResult result = OpFor(tensor.request())->ResultOf(tensor, index);
    EXPECT_LE(result.aux_offset + result.aux_count * sizeof(int64_t), slot_bytes_);
    std::vector<int64_t> values(result.aux_count);
    std::memcpy(values.data(), slot_ + result.aux_offset, values.size() * sizeof(int64_t));
    return values;
  }

  absl::Status Check(const negotiation::ReadyTensor& tensor) {
    return OpFor(tensor.request())->Check(tensor);
  }

  uint64_t arena_bytes_ = kArenaBytes;
  std::vector<std::byte> zeros_;
  std::vector<std::unique_ptr<job::ClientRecord>> clients_;
  v1::Collective collective_ = v1::COLLECTIVE_ALLREDUCE;
  std::vector<std::byte> slot_storage_;
  std::byte* slot_ = nullptr;
  uint64_t slot_bytes_ = 0;
};

std::vector<float> Floats(std::initializer_list<float> values) { return values; }

// --- Shared pieces --------------------------------------------------------------

// The op OpFor picks for a request of `collective` with reduce op `op`.
const CollectiveOp* OpOf(v1::Collective collective, v1::ReduceOp op = v1::REDUCE_OP_SUM) {
  v1::TensorRequest request;
  request.set_collective(collective);
  request.set_op(op);
  return OpFor(request);
}

TEST(CollectiveOpTest, OpForHasAnOpForEveryDataCollectiveOnly) {
  for (v1::Collective collective :
       {v1::COLLECTIVE_ALLREDUCE, v1::COLLECTIVE_REDUCESCATTER, v1::COLLECTIVE_ALLGATHER,
        v1::COLLECTIVE_BROADCAST, v1::COLLECTIVE_ALLTOALL, v1::COLLECTIVE_REDUCE,
        v1::COLLECTIVE_GATHER, v1::COLLECTIVE_SCATTER}) {
    EXPECT_NE(OpOf(collective), nullptr) << CollectiveName(collective);
  }
  for (v1::Collective collective :
       {v1::COLLECTIVE_UNSPECIFIED, v1::COLLECTIVE_BARRIER, v1::COLLECTIVE_JOIN,
        v1::COLLECTIVE_ADD_PROCESS_SET, v1::COLLECTIVE_REMOVE_PROCESS_SET}) {
    EXPECT_EQ(OpOf(collective), nullptr) << CollectiveName(collective);
  }
  EXPECT_EQ(OpOf(v1::COLLECTIVE_ALLREDUCE)->phase(), exec::kPhaseReduce);
  EXPECT_EQ(OpOf(v1::COLLECTIVE_REDUCESCATTER)->phase(), exec::kPhaseReduce);
  EXPECT_EQ(OpOf(v1::COLLECTIVE_ALLGATHER)->phase(), exec::kPhaseFusionCopy);
  EXPECT_EQ(OpOf(v1::COLLECTIVE_BROADCAST)->phase(), exec::kPhaseFusionCopy);
  EXPECT_EQ(OpOf(v1::COLLECTIVE_ALLTOALL)->phase(), exec::kPhaseFusionCopy);
  EXPECT_EQ(OpOf(v1::COLLECTIVE_REDUCE)->phase(), exec::kPhaseReduce);
  EXPECT_EQ(OpOf(v1::COLLECTIVE_GATHER)->phase(), exec::kPhaseFusionCopy);
  EXPECT_EQ(OpOf(v1::COLLECTIVE_SCATTER)->phase(), exec::kPhaseFusionCopy);
}

TEST(CollectiveOpTest, OpForPicksAdasumsOwnOpForAnAdasumAllreduce) {
  EXPECT_EQ(OpOf(v1::COLLECTIVE_ALLREDUCE, v1::REDUCE_OP_ADASUM), &AdasumAllreduceOp());
  for (v1::ReduceOp op : {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MIN,
                          v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT}) {
    EXPECT_EQ(OpOf(v1::COLLECTIVE_ALLREDUCE, op), &AllreduceOp()) << ReduceOpName(op);
  }
  EXPECT_EQ(OpOf(v1::COLLECTIVE_ALLREDUCE, v1::REDUCE_OP_ADASUM)->phase(), exec::kPhaseReduce);
}

TEST(CollectiveOpTest, RowBytesAndDim0) {
  v1::TensorRequest request;
  request.set_dtype(v1::DATA_TYPE_FLOAT64);
  EXPECT_EQ(RowBytes(request), 8u) << "a scalar is one row";
  EXPECT_EQ(Dim0(request), 0);
  request.add_shape(5);
  EXPECT_EQ(RowBytes(request), 8u);
  EXPECT_EQ(Dim0(request), 5);
  request.add_shape(3);
  request.add_shape(2);
  EXPECT_EQ(RowBytes(request), 48u);
  request.set_shape(2, 0);
  EXPECT_EQ(RowBytes(request), 0u);
}

// --- Allreduce ------------------------------------------------------------------

TEST_F(CollectiveOpsTest, AllreduceSumsInRankOrderForEveryRank) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLREDUCE, 3);
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {2, 2}, Floats({1, 2, 3, 4}));
  Submit(tensor, 1, v1::DATA_TYPE_FLOAT32, {2, 2}, Floats({10, 20, 30, 40}));
  Submit(tensor, 2, v1::DATA_TYPE_FLOAT32, {2, 2}, Floats({100, 200, 300, 400}));
  const CollectiveOp& op = AllreduceOp();
  EXPECT_EQ(op.SlotBytes(tensor), 64u);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  for (size_t i = 0; i < 3; ++i) {
    const RankResult result = op.ResultOf(tensor, i);
    EXPECT_EQ(result.offset, 0u);
    EXPECT_EQ(result.bytes, 16u);
    EXPECT_EQ(result.dim0, 2);
    EXPECT_EQ(result.aux_count, 0u);
    EXPECT_THAT(ResultOf<float>(tensor, i), ElementsAre(111, 222, 333, 444));
  }
}

TEST_F(CollectiveOpsTest, AllreduceCountsJoinedRanksAsZeros) {
  // Set ranks 1 and 3 of 4 have joined.
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLREDUCE, 4, /*set_id=*/2);
  Submit(tensor, 0, v1::DATA_TYPE_INT32, {3}, std::vector<int32_t>{1, -2, 3});
  Submit(tensor, 2, v1::DATA_TYPE_INT32, {3}, std::vector<int32_t>{5, 6, -7});
  ASSERT_TRUE(tensor.has_joined_ranks());
  EXPECT_TRUE(Check(tensor).ok()) << "only allreduce runs while ranks have joined";
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  EXPECT_THAT(ResultOf<int32_t>(tensor, 0), ElementsAre(6, 4, -4));
  EXPECT_THAT(ResultOf<int32_t>(tensor, 1), ElementsAre(6, 4, -4));

  // MIN sees the zeros: a joined rank's input is really zero, not absent.
  for (negotiation::Submission& submission : tensor.submissions)
    submission.request.set_op(v1::REDUCE_OP_MIN);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  EXPECT_THAT(ResultOf<int32_t>(tensor, 0), ElementsAre(0, -2, -7));
}

TEST_F(CollectiveOpsTest, AllreduceAverageDividesByTheSetSize) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLREDUCE, 4);
  const auto average = [](v1::TensorRequest& r) { r.set_op(v1::REDUCE_OP_AVERAGE); };
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT64, {2}, std::vector<double>{4, 8}, average);
  Submit(tensor, 3, v1::DATA_TYPE_FLOAT64, {2}, std::vector<double>{12, 0}, average);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  EXPECT_THAT(ResultOf<double>(tensor, 1), ElementsAre(4, 2))
      << "joined ranks count: (4 + 12) / 4, (8 + 0) / 4";

  const exec::ReduceSpec spec = ReductionSpec(tensor);
  EXPECT_EQ(spec.op, v1::REDUCE_OP_SUM);
  EXPECT_EQ(spec.divisor, 4);
  EXPECT_EQ(spec.dtype, v1::DATA_TYPE_FLOAT64);
  EXPECT_EQ(spec.prescale, 1.0);
  EXPECT_EQ(spec.postscale, 1.0);
}

TEST_F(CollectiveOpsTest, AllreduceAppliesTheScaleFactors) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLREDUCE, 2);
  const auto scaled = [](v1::TensorRequest& r) {
    r.set_prescale(2);
    r.set_postscale(0.25);
  };
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {2}, Floats({1, 2}), scaled);
  Submit(tensor, 1, v1::DATA_TYPE_FLOAT32, {2}, Floats({3, 6}), scaled);
  const exec::ReduceSpec spec = ReductionSpec(tensor);
  EXPECT_EQ(spec.prescale, 2.0);
  EXPECT_EQ(spec.postscale, 0.25);
  EXPECT_EQ(spec.divisor, 1) << "only average divides";
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  EXPECT_THAT(ResultOf<float>(tensor, 0), ElementsAre(2, 4));
}

TEST_F(CollectiveOpsTest, AllreduceAdasumPairsNeighboursFirst) {
  // ((0,1),(2,3)): Adasum((1,0),(1,0)) = (1,0); Adasum((0,1),(2,2)) =
  // 0·(0,1) + 7/8·(2,2); then 1/8·(1,0) + 6/7·(1.75,1.75) = (1.625, 1.5).
  // Pairing (0,2),(1,3) instead would give (1.375, 1.375).
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLREDUCE, 4);
  const auto adasum = [](v1::TensorRequest& r) { r.set_op(v1::REDUCE_OP_ADASUM); };
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT64, {2}, std::vector<double>{1, 0}, adasum);
  Submit(tensor, 1, v1::DATA_TYPE_FLOAT64, {2}, std::vector<double>{1, 0}, adasum);
  Submit(tensor, 2, v1::DATA_TYPE_FLOAT64, {2}, std::vector<double>{0, 1}, adasum);
  Submit(tensor, 3, v1::DATA_TYPE_FLOAT64, {2}, std::vector<double>{2, 2}, adasum);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_THAT(ResultOf<double>(tensor, i), ElementsAre(::testing::DoubleNear(1.625, 1e-12),
                                                         ::testing::DoubleNear(1.5, 1e-12)));
  }
}

TEST_F(CollectiveOpsTest, AllreduceAdasumCountsJoinedRanksAsZeros) {
  // Set rank 3 has joined: Adasum((0,1), 0) = (0,1), and the orthogonal
  // halves then add up.
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLREDUCE, 4);
  const auto adasum = [](v1::TensorRequest& r) { r.set_op(v1::REDUCE_OP_ADASUM); };
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {2}, Floats({1, 0}), adasum);
  Submit(tensor, 1, v1::DATA_TYPE_FLOAT32, {2}, Floats({1, 0}), adasum);
  Submit(tensor, 2, v1::DATA_TYPE_FLOAT32, {2}, Floats({0, 1}), adasum);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  EXPECT_THAT(ResultOf<float>(tensor, 0), ElementsAre(1, 1));
}

TEST_F(CollectiveOpsTest, AllreduceAdasumRefusesSizesOtherThanPowersOfTwoAndUnevenNodes) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLREDUCE, 3);
  const auto adasum = [](v1::TensorRequest& r) { r.set_op(v1::REDUCE_OP_ADASUM); };
  for (int32_t rank = 0; rank < 3; ++rank) {
    Submit(tensor, rank, v1::DATA_TYPE_FLOAT32, {2}, Floats({1, 2}), adasum);
  }
  absl::Status status = Check(tensor);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(status.message(),
            "tensor 'w': Adasum needs a power-of-two number of ranks (it pairs rank r with r ^ 1, "
            "r ^ 2, ... as Horovod does, and Horovod refuses other sizes too); the process set "
            "has 3");

  // Across nodes, every node must hold as many of the set's ranks.
  auto span = std::make_shared<job::SetSpan>();
  span->nodes = {0, 1};
  span->first = {0, 2};
  span->count = {2, 1};
  tensor.span = span;
  tensor.across_nodes = true;
  status = Check(tensor);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(status.message(),
            "tensor 'w': Adasum across nodes needs every node to hold the same number of the "
            "set's ranks, so that Horovod's pairing of rank r with r ^ 1, r ^ 2, ... combines each "
            "node's ranks before it combines nodes; the nodes hold 2, 1 ranks");
  span->count = {2, 2};
  span->first = {0, 2};
  tensor.set_size = 4;
  EXPECT_TRUE(Check(tensor).ok()) << Check(tensor);
}

// Horovod's NCCL build for GPU tensors: on one node the sum of the ranks'
// prescaled inputs times postscale / local size, whatever the number of
// ranks (3 here, which the tree over ranks refuses).
TEST_F(CollectiveOpsTest, AllreduceAdasumOverNodesAveragesTheRanksOfOneNode) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLREDUCE, 3);
  const auto nodes = [](v1::TensorRequest& r) {
    r.set_op(v1::REDUCE_OP_ADASUM);
    r.set_adasum_scope(v1::ADASUM_SCOPE_NODES);
    r.set_prescale(2);
    r.set_postscale(0.5);
  };
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT64, {3}, std::vector<double>{1, 0, 3}, nodes);
  Submit(tensor, 1, v1::DATA_TYPE_FLOAT64, {3}, std::vector<double>{2, 6, -3}, nodes);
  Submit(tensor, 2, v1::DATA_TYPE_FLOAT64, {3}, std::vector<double>{3, 3, 9}, nodes);
  ASSERT_TRUE(Check(tensor).ok()) << Check(tensor);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  // 2·(6, 9, 9)·0.5/3.
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_THAT(ResultOf<double>(tensor, i),
                ElementsAre(::testing::DoubleNear(2, 1e-12), ::testing::DoubleNear(3, 1e-12),
                            ::testing::DoubleNear(3, 1e-12)));
  }
}

TEST_F(CollectiveOpsTest, AllreduceAdasumOverNodesNeedsAPowerOfTwoNodesOfEqualSize) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLREDUCE, 6);
  const auto nodes = [](v1::TensorRequest& r) {
    r.set_op(v1::REDUCE_OP_ADASUM);
    r.set_adasum_scope(v1::ADASUM_SCOPE_NODES);
  };
  for (int32_t rank = 0; rank < 6; ++rank) {
    Submit(tensor, rank, v1::DATA_TYPE_FLOAT32, {2}, Floats({1, 2}), nodes);
  }
  auto span = std::make_shared<job::SetSpan>();
  span->nodes = {0, 1, 2};
  span->first = {0, 2, 4};
  span->count = {2, 2, 2};
  tensor.span = span;
  tensor.across_nodes = true;
  absl::Status status = Check(tensor);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(status.message(),
            "tensor 'w': Adasum of GPU tensors combines the nodes' sums pairwise (node n with "
            "n ^ 1, n ^ 2, ... as Horovod's NCCL build does) and needs a power-of-two number of "
            "nodes; the process set spans 3");
  span->count = {3, 2, 1};
  EXPECT_THAT(Check(tensor).message(),
              ::testing::HasSubstr("needs every node to hold the same number of the set's ranks"));
  span->nodes = {0, 1};
  span->first = {0, 3};
  span->count = {3, 3};
  EXPECT_TRUE(Check(tensor).ok()) << Check(tensor);
}

TEST_F(CollectiveOpsTest, AllreduceOfAnEmptyTensorTakesNoSpace) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLREDUCE, 2);
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {0, 3}, Floats({}));
  Submit(tensor, 1, v1::DATA_TYPE_FLOAT32, {0, 3}, Floats({}));
  EXPECT_EQ(AllreduceOp().SlotBytes(tensor), 0u);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  const RankResult result = AllreduceOp().ResultOf(tensor, 1);
  EXPECT_EQ(result.bytes, 0u);
  EXPECT_EQ(result.dim0, 0);
}

TEST_F(CollectiveOpsTest, AllreduceLargerThanAPieceWithAJoinedRank) {
  // 1.5 pieces of float32 per rank; rank 1 of 3 has joined, so the zeros
  // stand in for it over every piece.
  arena_bytes_ = 8 << 20;
  const uint64_t count = kPieceBytes / 4 * 3 / 2;
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLREDUCE, 3);
  std::vector<float> a(count);
  std::vector<float> b(count);
  for (uint64_t i = 0; i < count; ++i) {
    a[i] = static_cast<float>(i % 1000);
    b[i] = static_cast<float>(i % 7) - 3.0f;
  }
  const auto average = [](v1::TensorRequest& r) { r.set_op(v1::REDUCE_OP_AVERAGE); };
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {static_cast<int64_t>(count)}, a, average);
  Submit(tensor, 2, v1::DATA_TYPE_FLOAT32, {static_cast<int64_t>(count)}, b, average);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  const std::vector<float> result = ResultOf<float>(tensor, 0);
  ASSERT_EQ(result.size(), count);
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < count; ++i) {
    // Summed in float32, then multiplied by 1/3 (reduce_kernels.h).
    const float expected = (a[i] + 0.0f + b[i]) * static_cast<float>(1.0 / 3.0);
    if (result[i] != expected) ++wrong;
  }
  EXPECT_EQ(wrong, 0u);
}

// --- Reducescatter ---------------------------------------------------------------

TEST_F(CollectiveOpsTest, ReducescatterGivesEachRankItsBlockOfRows) {
  // 7 rows of 2 among 3 ranks: 3, 2, 2 rows (the first dim0 % size ranks get
  // one more).
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_REDUCESCATTER, 3);
  std::vector<int32_t> input(14);
  std::iota(input.begin(), input.end(), 0);
  for (int32_t rank = 0; rank < 3; ++rank) {
    std::vector<int32_t> mine = input;
    for (int32_t& value : mine) value *= rank + 1;  // the sum is 6 * input
    Submit(tensor, rank, v1::DATA_TYPE_INT32, {7, 2}, mine);
  }
  const CollectiveOp& op = ReducescatterOp();
  EXPECT_EQ(op.SlotBytes(tensor), 64u) << "the whole reduction: 56 bytes, rounded up";
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  struct Expected {
    uint64_t offset;
    int64_t rows;
  };
  const Expected expected[] = {{0, 3}, {24, 2}, {40, 2}};
  for (size_t i = 0; i < 3; ++i) {
    const RankResult result = op.ResultOf(tensor, i);
    EXPECT_EQ(result.offset, expected[i].offset) << i;
    EXPECT_EQ(result.dim0, expected[i].rows) << i;
    EXPECT_EQ(result.bytes, static_cast<uint64_t>(expected[i].rows) * 8) << i;
    std::vector<int32_t> rows;
    for (uint64_t k = expected[i].offset / 4; k < expected[i].offset / 4 + expected[i].rows * 2;
         ++k) {
      rows.push_back(6 * input[k]);
    }
    EXPECT_THAT(ResultOf<int32_t>(tensor, i), ElementsAreArray(rows)) << i;
  }
}

TEST_F(CollectiveOpsTest, ReducescatterWithFewerRowsThanRanks) {
  // 2 rows among 4 ranks: 1, 1, 0, 0. Average divides by the set size.
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_REDUCESCATTER, 4);
  const auto average = [](v1::TensorRequest& r) { r.set_op(v1::REDUCE_OP_AVERAGE); };
  for (int32_t rank = 0; rank < 4; ++rank) {
    Submit(tensor, rank, v1::DATA_TYPE_FLOAT32, {2, 1}, Floats({4, 8}), average);
  }
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  EXPECT_THAT(ResultOf<float>(tensor, 0), ElementsAre(4));
  EXPECT_THAT(ResultOf<float>(tensor, 1), ElementsAre(8));
  for (size_t i : {2, 3}) {
    const RankResult result = ReducescatterOp().ResultOf(tensor, i);
    EXPECT_EQ(result.bytes, 0u) << i;
    EXPECT_EQ(result.dim0, 0) << i;
    EXPECT_EQ(result.offset, 8u) << i << ": an empty block at the end of the rows";
  }
}

TEST_F(CollectiveOpsTest, ReducescatterOfNoRows) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_REDUCESCATTER, 2);
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {0, 5}, Floats({}));
  Submit(tensor, 1, v1::DATA_TYPE_FLOAT32, {0, 5}, Floats({}));
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  for (size_t i : {0, 1}) {
    const RankResult result = ReducescatterOp().ResultOf(tensor, i);
    EXPECT_EQ(result.bytes, 0u);
    EXPECT_EQ(result.dim0, 0);
  }
}

TEST_F(CollectiveOpsTest, ReducescatterRefusesJoinedRanks) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_REDUCESCATTER, 3);
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {3}, Floats({1, 2, 3}));
  Submit(tensor, 2, v1::DATA_TYPE_FLOAT32, {3}, Floats({1, 2, 3}));
  const absl::Status status = Check(tensor);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "reducescatter of 'w' cannot run while rank 1 of process set 0 has joined: after a "
            "join only allreduce carries on");
}

// --- Allgather ----------------------------------------------------------------------

TEST_F(CollectiveOpsTest, AllgatherConcatenatesFirstDimensionsThatDiffer) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLGATHER, 4);
  Submit(tensor, 0, v1::DATA_TYPE_INT16, {2, 3}, std::vector<int16_t>{1, 2, 3, 4, 5, 6});
  Submit(tensor, 1, v1::DATA_TYPE_INT16, {0, 3}, std::vector<int16_t>{});
  Submit(tensor, 2, v1::DATA_TYPE_INT16, {1, 3}, std::vector<int16_t>{7, 8, 9});
  Submit(tensor, 3, v1::DATA_TYPE_INT16, {3, 3},
         std::vector<int16_t>{10, 11, 12, 13, 14, 15, 16, 17, 18});
  const CollectiveOp& op = AllgatherOp();
  EXPECT_EQ(op.SlotBytes(tensor), 64u) << "36 bytes, rounded up";
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  std::vector<int16_t> all(18);
  std::iota(all.begin(), all.end(), int16_t{1});
  for (size_t i = 0; i < 4; ++i) {
    const RankResult result = op.ResultOf(tensor, i);
    EXPECT_EQ(result.offset, 0u);
    EXPECT_EQ(result.bytes, 36u);
    EXPECT_EQ(result.dim0, 6);
    EXPECT_THAT(ResultOf<int16_t>(tensor, i), ElementsAreArray(all)) << i;
  }
}

TEST_F(CollectiveOpsTest, AllgatherOfNothing) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLGATHER, 2);
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {0}, Floats({}));
  Submit(tensor, 1, v1::DATA_TYPE_FLOAT32, {0}, Floats({}));
  EXPECT_EQ(AllgatherOp().SlotBytes(tensor), 0u);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  EXPECT_EQ(AllgatherOp().ResultOf(tensor, 0).bytes, 0u);
  EXPECT_EQ(AllgatherOp().ResultOf(tensor, 0).dim0, 0);
}

TEST_F(CollectiveOpsTest, AllgatherSlotSpansEveryRanksInput) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLGATHER, 3);
  for (int32_t rank = 0; rank < 3; ++rank) {
    Submit(tensor, rank, v1::DATA_TYPE_FLOAT64, {5 + rank},
           std::vector<double>(static_cast<size_t>(5 + rank), rank));
  }
  EXPECT_EQ(AllgatherOp().SlotBytes(tensor), 192u) << "(5 + 6 + 7) * 8 = 144 bytes, rounded up";
}

TEST_F(CollectiveOpsTest, AllgatherRefusesJoinedRanks) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLGATHER, 4, /*set_id=*/2);
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {1}, Floats({1}));
  Submit(tensor, 2, v1::DATA_TYPE_FLOAT32, {1}, Floats({1}));
  const absl::Status status = Check(tensor);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "allgather of 'w' cannot run while ranks 1, 3 of process set 2 have joined: after a "
            "join only allreduce carries on");
}

// --- Broadcast ------------------------------------------------------------------------

TEST_F(CollectiveOpsTest, BroadcastCopiesTheRootsInputForEveryRoot) {
  for (int32_t root = 0; root < 3; ++root) {
    negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_BROADCAST, 3);
    const auto at_root = [root](v1::TensorRequest& r) { r.set_root_rank(root); };
    for (int32_t rank = 0; rank < 3; ++rank) {
      Submit(tensor, rank, v1::DATA_TYPE_UINT8, {5},
             std::vector<uint8_t>(5, static_cast<uint8_t>(rank + 1)), at_root);
    }
    EXPECT_EQ(BroadcastOp().SlotBytes(tensor), 64u);
    ASSERT_NO_FATAL_FAILURE(Run(tensor));
    for (size_t i = 0; i < 3; ++i) {
      const RankResult result = BroadcastOp().ResultOf(tensor, i);
      EXPECT_EQ(result.offset, 0u);
      EXPECT_EQ(result.bytes, 5u);
      EXPECT_EQ(result.dim0, 5);
      EXPECT_THAT(ResultOf<uint8_t>(tensor, i),
                  ElementsAreArray(std::vector<uint8_t>(5, static_cast<uint8_t>(root + 1))))
          << "root " << root << ", rank " << i;
    }
    // Out of place: no rank's input is written.
    for (int32_t rank = 0; rank < 3; ++rank) {
      const std::byte* input = clients_[rank]->segment->arena() + 64;
      for (int k = 0; k < 5; ++k) {
        EXPECT_EQ(input[k], std::byte(static_cast<uint8_t>(rank + 1))) << "rank " << rank;
      }
    }
  }
}

TEST_F(CollectiveOpsTest, BroadcastRefusesARootOutsideTheSet) {
  for (int32_t root : {3, 4, -1}) {
    negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_BROADCAST, 3, /*set_id=*/1);
    for (int32_t rank = 0; rank < 3; ++rank) {
      Submit(tensor, rank, v1::DATA_TYPE_FLOAT32, {1}, Floats({1}),
             [root](v1::TensorRequest& r) { r.set_root_rank(root); });
    }
    const absl::Status status = Check(tensor);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), absl::StrCat("broadcast of 'w': root rank ", root,
                                             " is not a rank of process set 1 (size 3)"));
  }
}

TEST_F(CollectiveOpsTest, BroadcastRefusesJoinedRanksFirst) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_BROADCAST, 2);
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {1}, Floats({1}),
         [](v1::TensorRequest& r) { r.set_root_rank(1); });
  const absl::Status status = Check(tensor);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "broadcast of 'w' cannot run while rank 1 of process set 0 has joined: after a join "
            "only allreduce carries on");
}

// --- Alltoall ---------------------------------------------------------------------------

TEST_F(CollectiveOpsTest, AlltoallWithoutSplitsSplitsTheFirstDimensionEvenly) {
  // Rank r sends rows {2j, 2j + 1} of its [4, 3] input to rank j.
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLTOALL, 2);
  std::vector<float> inputs[2];
  for (int32_t rank = 0; rank < 2; ++rank) {
    for (int k = 0; k < 12; ++k) inputs[rank].push_back(static_cast<float>(100 * rank + k));
    Submit(tensor, rank, v1::DATA_TYPE_FLOAT32, {4, 3}, inputs[rank]);
  }
  ASSERT_TRUE(Check(tensor).ok()) << Check(tensor);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  // Per receiver: 48 bytes of data (64 with padding), then 2 splits (64).
  EXPECT_EQ(AlltoallOp().SlotBytes(tensor), 256u);
  for (size_t j = 0; j < 2; ++j) {
    const RankResult result = AlltoallOp().ResultOf(tensor, j);
    EXPECT_EQ(result.offset, j * 128);
    EXPECT_EQ(result.bytes, 48u);
    EXPECT_EQ(result.dim0, 4);
    EXPECT_EQ(result.aux_offset, j * 128 + 64);
    EXPECT_EQ(result.aux_count, 2u);
    std::vector<float> expected;
    for (int32_t r = 0; r < 2; ++r) {
      expected.insert(expected.end(), inputs[r].begin() + 6 * j, inputs[r].begin() + 6 * j + 6);
    }
    EXPECT_THAT(ResultOf<float>(tensor, j), ElementsAreArray(expected)) << j;
    EXPECT_THAT(AuxOf(tensor, j), ElementsAre(2, 2));
  }
}

TEST_F(CollectiveOpsTest, AlltoallWithSplitsIncludingZeroRows) {
  // Rows of 2 int16 (4 bytes). Rank 0 sends [0, 1, 2] rows, rank 1 [2, 0, 0],
  // rank 2 (no rows) [0, 0, 0].
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLTOALL, 3);
  const auto splits = [](std::vector<int64_t> values) {
    return [values](v1::TensorRequest& r) {
      for (int64_t value : values) r.add_splits(value);
    };
  };
  Submit(tensor, 0, v1::DATA_TYPE_INT16, {3, 2}, std::vector<int16_t>{1, 2, 3, 4, 5, 6},
         splits({0, 1, 2}));
  Submit(tensor, 1, v1::DATA_TYPE_INT16, {2, 2}, std::vector<int16_t>{7, 8, 9, 10},
         splits({2, 0, 0}));
  Submit(tensor, 2, v1::DATA_TYPE_INT16, {0, 2}, std::vector<int16_t>{}, splits({0, 0, 0}));
  ASSERT_TRUE(Check(tensor).ok()) << Check(tensor);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));

  EXPECT_THAT(ResultOf<int16_t>(tensor, 0), ElementsAre(7, 8, 9, 10));
  EXPECT_THAT(AuxOf(tensor, 0), ElementsAre(0, 2, 0));
  EXPECT_THAT(ResultOf<int16_t>(tensor, 1), ElementsAre(1, 2));
  EXPECT_THAT(AuxOf(tensor, 1), ElementsAre(1, 0, 0));
  EXPECT_THAT(ResultOf<int16_t>(tensor, 2), ElementsAre(3, 4, 5, 6));
  EXPECT_THAT(AuxOf(tensor, 2), ElementsAre(2, 0, 0));
  EXPECT_EQ(AlltoallOp().ResultOf(tensor, 0).dim0, 2);
  EXPECT_EQ(AlltoallOp().ResultOf(tensor, 1).dim0, 1);
  EXPECT_EQ(AlltoallOp().ResultOf(tensor, 2).dim0, 2);
}

TEST_F(CollectiveOpsTest, AlltoallARankMayReceiveNothing) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLTOALL, 2);
  const auto to_zero = [](v1::TensorRequest& r) {
    r.add_splits(r.shape(0));
    r.add_splits(0);
  };
  Submit(tensor, 0, v1::DATA_TYPE_INT32, {2}, std::vector<int32_t>{1, 2}, to_zero);
  Submit(tensor, 1, v1::DATA_TYPE_INT32, {1}, std::vector<int32_t>{3}, to_zero);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  EXPECT_THAT(ResultOf<int32_t>(tensor, 0), ElementsAre(1, 2, 3));
  EXPECT_THAT(AuxOf(tensor, 0), ElementsAre(2, 1));
  const RankResult nothing = AlltoallOp().ResultOf(tensor, 1);
  EXPECT_EQ(nothing.bytes, 0u);
  EXPECT_EQ(nothing.dim0, 0);
  EXPECT_THAT(AuxOf(tensor, 1), ElementsAre(0, 0)) << "the splits arrive even with no rows";
}

TEST_F(CollectiveOpsTest, AlltoallMixesRanksWithAndWithoutSplits) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLTOALL, 2);
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {4}, Floats({1, 2, 3, 4}));  // 2 and 2
  Submit(tensor, 1, v1::DATA_TYPE_FLOAT32, {3}, Floats({5, 6, 7}), [](v1::TensorRequest& r) {
    r.add_splits(3);
    r.add_splits(0);
  });
  ASSERT_TRUE(Check(tensor).ok()) << Check(tensor);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  EXPECT_THAT(ResultOf<float>(tensor, 0), ElementsAre(1, 2, 5, 6, 7));
  EXPECT_THAT(AuxOf(tensor, 0), ElementsAre(2, 3));
  EXPECT_THAT(ResultOf<float>(tensor, 1), ElementsAre(3, 4));
  EXPECT_THAT(AuxOf(tensor, 1), ElementsAre(2, 0));
}

TEST_F(CollectiveOpsTest, AlltoallLayoutKeepsEveryPartAligned) {
  // Odd sizes everywhere: 3 ranks, rows of 3 bytes.
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLTOALL, 3);
  const std::vector<std::vector<int64_t>> splits = {{1, 5, 0}, {7, 0, 2}, {3, 3, 3}};
  for (int32_t rank = 0; rank < 3; ++rank) {
    const int64_t rows = std::accumulate(splits[rank].begin(), splits[rank].end(), int64_t{0});
    std::vector<uint8_t> data(static_cast<size_t>(rows) * 3);
    for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>(50 * rank + k);
    Submit(tensor, rank, v1::DATA_TYPE_UINT8, {rows, 3}, data, [&](v1::TensorRequest& r) {
      for (int64_t split : splits[rank]) r.add_splits(split);
    });
  }
  ASSERT_TRUE(Check(tensor).ok()) << Check(tensor);
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  uint64_t end = 0;
  for (size_t j = 0; j < 3; ++j) {
    const RankResult result = AlltoallOp().ResultOf(tensor, j);
    EXPECT_EQ(result.offset % shm::kDataAlignment, 0u) << j;
    EXPECT_EQ(result.aux_offset % shm::kDataAlignment, 0u) << j;
    EXPECT_GE(result.offset, end) << j << ": parts do not overlap";
    EXPECT_GE(result.aux_offset, result.offset + result.bytes) << j;
    end = result.aux_offset + result.aux_count * sizeof(int64_t);
    int64_t rows = 0;
    std::vector<int64_t> received;
    for (size_t r = 0; r < 3; ++r) {
      rows += splits[r][j];
      received.push_back(splits[r][j]);
    }
    EXPECT_EQ(result.dim0, rows);
    EXPECT_EQ(result.bytes, static_cast<uint64_t>(rows) * 3);
    EXPECT_EQ(AuxOf(tensor, j), received);
  }
  EXPECT_LE(end, AlltoallOp().SlotBytes(tensor));
  // Receiver 0 gets row 0 of rank 0, rows 0-6 of rank 1, rows 0-2 of rank 2.
  std::vector<uint8_t> expected;
  for (int k = 0; k < 3; ++k) expected.push_back(static_cast<uint8_t>(k));
  for (int k = 0; k < 21; ++k) expected.push_back(static_cast<uint8_t>(50 + k));
  for (int k = 0; k < 9; ++k) expected.push_back(static_cast<uint8_t>(100 + k));
  EXPECT_THAT(ResultOf<uint8_t>(tensor, 0), ElementsAreArray(expected));
}

TEST_F(CollectiveOpsTest, AlltoallRefusesTheWrongNumberOfSplits) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLTOALL, 3, /*set_id=*/1);
  for (int32_t rank = 0; rank < 3; ++rank) {
    Submit(tensor, rank, v1::DATA_TYPE_FLOAT32, {3}, Floats({1, 2, 3}),
           [rank](v1::TensorRequest& r) {
             if (rank == 1) {
               r.add_splits(1);
               r.add_splits(2);
             }
           });
  }
  const absl::Status status = Check(tensor);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "alltoall of 'w': rank 11 sent 2 splits for a process set of 3 ranks")
      << "the rank is the global one";
}

TEST_F(CollectiveOpsTest, AlltoallWithoutSplitsNeedsAnEvenDivision) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLTOALL, 3);
  Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {3}, Floats({1, 2, 3}));
  Submit(tensor, 1, v1::DATA_TYPE_FLOAT32, {6}, Floats({1, 2, 3, 4, 5, 6}));
  Submit(tensor, 2, v1::DATA_TYPE_FLOAT32, {5}, Floats({1, 2, 3, 4, 5}));
  const absl::Status status = Check(tensor);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "alltoall of 'w': rank 12's first dimension 5 does not divide evenly among 3 ranks; "
            "pass splits to say how many rows go to each rank");
  // Zero rows divide evenly.
  tensor.submissions.pop_back();
  Submit(tensor, 2, v1::DATA_TYPE_FLOAT32, {0}, Floats({}));
  EXPECT_TRUE(Check(tensor).ok()) << Check(tensor);
}

TEST_F(CollectiveOpsTest, AlltoallRefusesJoinedRanks) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_ALLTOALL, 2);
  Submit(tensor, 1, v1::DATA_TYPE_FLOAT32, {2}, Floats({1, 2}));
  const absl::Status status = Check(tensor);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "alltoall of 'w' cannot run while rank 0 of process set 0 has joined: after a join "
            "only allreduce carries on");
}

// --- Reduce, gather, scatter -----------------------------------------------------------

// What a rank that receives nothing of a rooted collective gets.
void ExpectEmpty(const RankResult& result) {
  EXPECT_EQ(result.bytes, 0u);
  EXPECT_EQ(result.dim0, 0);
  EXPECT_FALSE(result.in_output);
}

TEST_F(CollectiveOpsTest, ReduceGivesEveryRootTheReductionAndTheOthersNothing) {
  for (int32_t root = 0; root < 3; ++root) {
    negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_REDUCE, 3);
    const auto edit = [root](v1::TensorRequest& r) {
      r.set_root_rank(root);
      r.set_op(v1::REDUCE_OP_AVERAGE);
      r.set_prescale(2);
      r.set_postscale(0.5);
    };
    Submit(tensor, 0, v1::DATA_TYPE_FLOAT32, {2, 2}, Floats({3, 6, 9, 12}), edit);
    Submit(tensor, 1, v1::DATA_TYPE_FLOAT32, {2, 2}, Floats({30, 60, 90, 120}), edit);
    Submit(tensor, 2, v1::DATA_TYPE_FLOAT32, {2, 2}, Floats({300, 600, 900, 1200}), edit);
    EXPECT_EQ(ReduceOp().SlotBytes(tensor), 64u);
    ASSERT_NO_FATAL_FAILURE(Run(tensor));
    for (size_t i = 0; i < 3; ++i) {
      const RankResult result = ReduceOp().ResultOf(tensor, i);
      if (static_cast<int32_t>(i) != root) {
        ExpectEmpty(result);
        continue;
      }
      EXPECT_EQ(result.bytes, 16u);
      EXPECT_EQ(result.dim0, 2);
      EXPECT_FALSE(result.in_output);
      // (2·(3 + 30 + 300)) / 3 · 0.5 = 111, and so on.
      EXPECT_THAT(ResultOf<float>(tensor, i), ElementsAre(111, 222, 333, 444)) << "root " << root;
    }
  }
}

TEST_F(CollectiveOpsTest, ReduceTakesMinMaxAndProductOfIntegers) {
  const std::pair<v1::ReduceOp, std::vector<int32_t>> cases[] = {
      {v1::REDUCE_OP_MIN, {-4, 1, 4}},
      {v1::REDUCE_OP_MAX, {3, 7, 5}},
      {v1::REDUCE_OP_PRODUCT, {-12, 7, 20}}};
  for (const auto& [op, expected] : cases) {
    negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_REDUCE, 2);
    const auto edit = [op = op](v1::TensorRequest& r) {
      r.set_root_rank(1);
      r.set_op(op);
    };
    Submit(tensor, 0, v1::DATA_TYPE_INT32, {3}, std::vector<int32_t>{3, 1, 5}, edit);
    Submit(tensor, 1, v1::DATA_TYPE_INT32, {3}, std::vector<int32_t>{-4, 7, 4}, edit);
    ASSERT_NO_FATAL_FAILURE(Run(tensor));
    EXPECT_THAT(ResultOf<int32_t>(tensor, 1), ElementsAreArray(expected)) << ReduceOpName(op);
    ExpectEmpty(ReduceOp().ResultOf(tensor, 0));
  }
}

TEST_F(CollectiveOpsTest, ReduceWritesTheRootsOutputInItsArenaInPlace) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_REDUCE, 3);
  for (int32_t rank = 0; rank < 3; ++rank) {
    Submit(tensor, rank, v1::DATA_TYPE_FLOAT64, {3},
           std::vector<double>{1.0 + rank, 10.0 * (rank + 1), -1.0}, [](v1::TensorRequest& r) {
             r.set_root_rank(2);
             // Every rank names its input as its output; only the root's is
             // written.
             r.set_output_offset(64);
           });
  }
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  const RankResult root = ReduceOp().ResultOf(tensor, 2);
  EXPECT_TRUE(root.in_output);
  EXPECT_EQ(root.bytes, 24u);
  std::vector<double> in_place(3);
  std::memcpy(in_place.data(), clients_[2]->segment->arena() + 64, 24);
  EXPECT_THAT(in_place, ElementsAre(6.0, 60.0, -3.0));
  for (int32_t rank = 0; rank < 2; ++rank) {
    ExpectEmpty(ReduceOp().ResultOf(tensor, static_cast<size_t>(rank)));
    std::vector<double> input(3);
    std::memcpy(input.data(), clients_[rank]->segment->arena() + 64, 24);
    EXPECT_THAT(input, ElementsAre(1.0 + rank, 10.0 * (rank + 1), -1.0)) << "rank " << rank;
  }
}

TEST_F(CollectiveOpsTest, RootedCollectivesRefuseARootOutsideTheSetAndJoinedRanks) {
  for (v1::Collective collective :
       {v1::COLLECTIVE_REDUCE, v1::COLLECTIVE_GATHER, v1::COLLECTIVE_SCATTER}) {
    negotiation::ReadyTensor tensor = Tensor(collective, 2, /*set_id=*/3);
    for (int32_t rank = 0; rank < 2; ++rank) {
      Submit(tensor, rank, v1::DATA_TYPE_FLOAT32, {1}, Floats({1}),
             [](v1::TensorRequest& r) { r.set_root_rank(2); });
    }
    EXPECT_EQ(Check(tensor).message(),
              absl::StrCat(CollectiveName(collective),
                           " of 'w': root rank 2 is not a rank of process set 3 (size 2)"));
    negotiation::ReadyTensor joined = Tensor(collective, 2);
    Submit(joined, 0, v1::DATA_TYPE_FLOAT32, {1}, Floats({1}));
    EXPECT_EQ(Check(joined).message(),
              absl::StrCat(CollectiveName(collective),
                           " of 'w' cannot run while rank 1 of process set 0 has joined: after a "
                           "join only allreduce carries on"));
  }
}

TEST_F(CollectiveOpsTest, GatherConcatenatesUnevenRowsAtTheRootOnly) {
  for (int32_t root = 0; root < 3; ++root) {
    negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_GATHER, 3);
    const auto at_root = [root](v1::TensorRequest& r) { r.set_root_rank(root); };
    Submit(tensor, 0, v1::DATA_TYPE_INT16, {1, 2}, std::vector<int16_t>{1, 2}, at_root);
    Submit(tensor, 1, v1::DATA_TYPE_INT16, {0, 2}, std::vector<int16_t>{}, at_root);
    Submit(tensor, 2, v1::DATA_TYPE_INT16, {3, 2}, std::vector<int16_t>{3, 4, 5, 6, 7, 8}, at_root);
    EXPECT_EQ(GatherOp().SlotBytes(tensor), 64u);
    ASSERT_NO_FATAL_FAILURE(Run(tensor));
    for (size_t i = 0; i < 3; ++i) {
      const RankResult result = GatherOp().ResultOf(tensor, i);
      if (static_cast<int32_t>(i) != root) {
        ExpectEmpty(result);
        continue;
      }
      EXPECT_EQ(result.dim0, 4);
      EXPECT_THAT(ResultOf<int16_t>(tensor, i), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
    }
  }
}

TEST_F(CollectiveOpsTest, ScatterGivesEveryRankItsRowsIncludingNone) {
  for (int32_t root = 0; root < 3; ++root) {
    negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_SCATTER, 3);
    const int64_t rows[] = {3, 0, 2};
    for (int32_t rank = 0; rank < 3; ++rank) {
      const auto edit = [&, rank](v1::TensorRequest& r) {
        r.set_root_rank(root);
        r.set_receive_rows(rows[rank]);
      };
      if (rank == root) {
        Submit(tensor, rank, v1::DATA_TYPE_FLOAT32, {5, 2}, Floats({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}),
               edit);
      } else {
        Submit(tensor, rank, v1::DATA_TYPE_FLOAT32, {0, 2}, std::vector<float>{}, edit);
      }
    }
    EXPECT_EQ(ScatterOp().SlotBytes(tensor), 64u);
    ASSERT_NO_FATAL_FAILURE(Run(tensor));
    EXPECT_THAT(ResultOf<float>(tensor, 0), ElementsAre(0, 1, 2, 3, 4, 5)) << "root " << root;
    ExpectEmpty(ScatterOp().ResultOf(tensor, 1));
    EXPECT_THAT(ResultOf<float>(tensor, 2), ElementsAre(6, 7, 8, 9)) << "root " << root;
    EXPECT_EQ(ScatterOp().ResultOf(tensor, 0).dim0, 3);
    EXPECT_EQ(ScatterOp().ResultOf(tensor, 2).dim0, 2);
  }
}

TEST_F(CollectiveOpsTest, ScatterWritesOutputsInTheReceiversArenasOnce) {
  negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_SCATTER, 2);
  Submit(tensor, 0, v1::DATA_TYPE_UINT8, {4}, std::vector<uint8_t>{1, 2, 3, 4},
         [](v1::TensorRequest& r) {
           r.set_receive_rows(1);
           r.set_output_offset(1024);
         });
  Submit(tensor, 1, v1::DATA_TYPE_UINT8, {0}, std::vector<uint8_t>{}, [](v1::TensorRequest& r) {
    r.set_receive_rows(3);
    r.set_output_offset(2048);
  });
  ASSERT_NO_FATAL_FAILURE(Run(tensor));
  const RankResult first = ScatterOp().ResultOf(tensor, 0);
  const RankResult second = ScatterOp().ResultOf(tensor, 1);
  EXPECT_TRUE(first.in_output);
  EXPECT_TRUE(second.in_output);
  EXPECT_EQ(first.bytes, 1u);
  EXPECT_EQ(second.bytes, 3u);
  EXPECT_EQ(clients_[0]->segment->arena()[1024], std::byte{1});
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(clients_[1]->segment->arena()[2048 + k], std::byte(static_cast<uint8_t>(2 + k)));
  }
  for (uint64_t k = 0; k < slot_bytes_; ++k) {
    ASSERT_EQ(slot_[k], kUntouched) << "a row went to the slot as well";
  }
}

TEST_F(CollectiveOpsTest, ScatterRefusesARootOutputOverItsInput) {
  // Root 0 keeps one of its 4 rows; an output at offset 66 lies over rows 2-3,
  // which rank 1's copy still reads. Right after the input is fine.
  for (const uint64_t out : {uint64_t{66}, uint64_t{68}}) {
    negotiation::ReadyTensor tensor = Tensor(v1::COLLECTIVE_SCATTER, 2);
    Submit(tensor, 0, v1::DATA_TYPE_UINT8, {4}, std::vector<uint8_t>{1, 2, 3, 4},
           [out](v1::TensorRequest& r) {
             r.set_receive_rows(1);
             r.set_output_offset(out);
           });
    Submit(tensor, 1, v1::DATA_TYPE_UINT8, {0}, std::vector<uint8_t>{},
           [](v1::TensorRequest& r) { r.set_receive_rows(3); });
    const absl::Status status = ScatterOp().Check(tensor);
    if (out == 68) {
      EXPECT_TRUE(status.ok()) << status;
      continue;
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("'s output (arena offset 66, 1 bytes) overlaps its input (offset 64, 4 "
                          "bytes)"));
  }
}

}  // namespace
}  // namespace collective::daemon::exec::ops
