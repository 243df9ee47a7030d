// daemon/ops/allreduce.cc, adasum.cc, broadcast.cc, reducescatter.cc and reduce.cc:
// results written straight into outputs that lie in the clients' own arenas
// (TensorRequest.output_offset), checked bit for bit against the
// result-segment path for every dtype and op, in place (output == input) and
// across pieces run in any order (the slot left alone when every rank has an
// output), and only where the daemon may.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "daemon/exec/adasum_kernel.h"
#include "daemon/exec/ops/collective_op.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/reduce_kernels.h"
#include "shm/client_segment.h"
#include "shm/segment_layout.h"
#include "tests/unit/exec/test_clients.h"

namespace collective::daemon::exec::ops {
namespace {

constexpr uint64_t kInputAt = 64;
constexpr int32_t kRanks = 3;

// Deterministic bytes that differ per rank and position (NaNs and all: the
// kernels are deterministic, so both paths must agree on every bit).
std::vector<std::byte> Pattern(int32_t rank, uint64_t bytes) {
  std::vector<std::byte> data(bytes);
  uint64_t state = 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(rank + 1);
  for (std::byte& b : data) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    b = static_cast<std::byte>(state >> 56);
  }
  return data;
}

// Every dtype with data.
std::vector<v1::DataType> DataTypes() {
  std::vector<v1::DataType> dtypes;
  for (int d = v1::DataType_MIN; d <= v1::DataType_MAX; ++d) {
    const auto dtype = static_cast<v1::DataType>(d);
    if (v1::DataType_IsValid(d) && ElementSize(dtype) > 0) dtypes.push_back(dtype);
  }
  return dtypes;
}

// The reduce ops the kernels take for `dtype` (not Adasum).
std::vector<v1::ReduceOp> ReduceOpsOf(v1::DataType dtype) {
  std::vector<v1::ReduceOp> ops;
  for (v1::ReduceOp op : {v1::REDUCE_OP_SUM, v1::REDUCE_OP_MIN, v1::REDUCE_OP_MAX,
                          v1::REDUCE_OP_PRODUCT, v1::REDUCE_OP_AVERAGE}) {
    const v1::ReduceOp kernel_op = op == v1::REDUCE_OP_AVERAGE ? v1::REDUCE_OP_SUM : op;
    if (IsReducible(dtype, kernel_op) &&
        !(dtype == v1::DATA_TYPE_BOOL && op == v1::REDUCE_OP_AVERAGE)) {
      ops.push_back(op);
    }
  }
  return ops;
}

class AllreduceOutputTest : public ::testing::Test {
 protected:
  AllreduceOutputTest() : zeros_(kPieceBytes) {}

  void MakeClients(uint64_t arena_bytes) {
    for (int32_t r = 0; r < kRanks; ++r) {
      clients_.push_back(NewTestClient(10 + r, arena_bytes));
      ASSERT_NE(clients_.back(), nullptr);
    }
  }

  std::byte* Arena(int32_t rank) { return clients_[static_cast<size_t>(rank)]->segment->arena(); }

  // Every rank's allreduce of `count` elements, its input (Pattern) at
  // kInputAt; outputs[r] is rank r's output_offset, or -1 for none.
  negotiation::ReadyTensor Tensor(v1::DataType dtype, v1::ReduceOp op, uint64_t count,
                                  const std::vector<int64_t>& outputs,
                                  v1::Collective collective = v1::COLLECTIVE_ALLREDUCE) {
    negotiation::ReadyTensor tensor;
    tensor.name = "w";
    tensor.set_size = kRanks;
    const uint64_t bytes = count * ElementSize(dtype);
    for (int32_t r = 0; r < kRanks; ++r) {
      const std::vector<std::byte> input = Pattern(r, bytes);
      std::memcpy(Arena(r) + kInputAt, input.data(), bytes);
      negotiation::Submission submission;
      submission.client = clients_[static_cast<size_t>(r)].get();
      submission.rank = 10 + r;
      submission.set_rank = r;
      v1::TensorRequest& request = submission.request;
      request.set_request_id(100 + static_cast<uint64_t>(r));
      request.set_name(tensor.name);
      request.set_collective(collective);
      request.set_op(op);
      request.set_root_rank(1);  // broadcast
      request.set_dtype(dtype);
      request.add_shape(static_cast<int64_t>(count / row_));
      if (row_ > 1) request.add_shape(static_cast<int64_t>(row_));
      request.set_offset(kInputAt);
      request.set_length(bytes);
      if (outputs[static_cast<size_t>(r)] >= 0) {
        request.set_output_offset(static_cast<uint64_t>(outputs[static_cast<size_t>(r)]));
      }
      tensor.submissions.push_back(std::move(submission));
    }
    return tensor;
  }

  // Runs the op as the executor does, its pieces in reverse order (each
  // piece must stand on its own); returns the slot.
  std::vector<std::byte> Run(const negotiation::ReadyTensor& tensor) {
    const CollectiveOp& op = *OpFor(tensor.request());
    EXPECT_TRUE(op.Check(tensor).ok());
    std::vector<std::byte> slot(op.SlotBytes(tensor), std::byte{0xab});
    WorkList work(zeros_.data());
    op.AddWork(tensor, slot.data(), work);
    for (size_t i = work.size(); i-- > 0;) work.Run(i);
    slot.resize(tensor.request().length());
    return slot;
  }

  std::vector<std::byte> At(int32_t rank, uint64_t offset, uint64_t bytes) {
    return {Arena(rank) + offset, Arena(rank) + offset + bytes};
  }

  std::vector<std::byte> zeros_;
  std::vector<std::unique_ptr<job::ClientRecord>> clients_;
  uint64_t row_ = 1;  // elements per row: the tensors are [count / row_, row_]
};

TEST_F(AllreduceOutputTest, EveryDtypeAndOpMatchesTheResultSegmentBitForBit) {
  ASSERT_NO_FATAL_FAILURE(MakeClients(64 << 10));
  constexpr uint64_t kCount = 1000;  // not a multiple of any vector width
  constexpr int64_t kApart = 16 << 10;
  int cases = 0;
  for (v1::DataType dtype : DataTypes()) {
    for (v1::ReduceOp op : ReduceOpsOf(dtype)) {
      ++cases;
      SCOPED_TRACE(DataTypeName(dtype) + " " + v1::ReduceOp_Name(op));
      const uint64_t bytes = kCount * ElementSize(dtype);
      const std::vector<std::byte> expected = Run(Tensor(dtype, op, kCount, {-1, -1, -1}));
      // Rank 0 in place, rank 1 elsewhere in its arena, rank 2 reads the slot.
      const negotiation::ReadyTensor tensor =
          Tensor(dtype, op, kCount, {static_cast<int64_t>(kInputAt), kApart, -1});
      std::memset(Arena(1) + kApart, 0x5a, bytes);
      const std::vector<std::byte> slot = Run(tensor);
      EXPECT_EQ(slot, expected) << "the slot still holds the result for rank 2";
      EXPECT_EQ(At(0, kInputAt, bytes), expected) << "rank 0's in-place output";
      EXPECT_EQ(At(1, kApart, bytes), expected) << "rank 1's output";
      EXPECT_EQ(At(1, kInputAt, bytes), Pattern(1, bytes)) << "rank 1's input is untouched";
      EXPECT_EQ(At(2, kInputAt, bytes), Pattern(2, bytes)) << "rank 2 named no output";
      EXPECT_TRUE(AllreduceOp().ResultOf(tensor, 0).in_output);
      EXPECT_TRUE(AllreduceOp().ResultOf(tensor, 1).in_output);
      EXPECT_FALSE(AllreduceOp().ResultOf(tensor, 2).in_output);
    }
  }
  EXPECT_GE(cases, 40) << "every numeric dtype with five ops, bool with two";
}

// Broadcast, reducescatter and reduce likewise: each output gets exactly
// the bits the rank would have read from the slot, for every dtype (and
// every op of the reductions); an output where the op writes none is left
// alone.
TEST_F(AllreduceOutputTest, EveryOtherCollectiveAndDtypeMatchesTheResultSegmentBitForBit) {
  ASSERT_NO_FATAL_FAILURE(MakeClients(64 << 10));
  constexpr uint64_t kCount = 1000;  // 334, 333 and 333 rows of a reducescatter
  constexpr int64_t kApart = 16 << 10;
  const auto at = static_cast<int64_t>(kInputAt);
  int cases = 0;
  for (v1::DataType dtype : DataTypes()) {
    const uint64_t element = ElementSize(dtype);
    const uint64_t bytes = kCount * element;
    const std::vector<std::byte> untouched(bytes, std::byte{0x5a});
    {
      SCOPED_TRACE("broadcast " + DataTypeName(dtype));
      ++cases;
      // Root 1 in place, rank 0 elsewhere, rank 2 reads the slot.
      const negotiation::ReadyTensor tensor = Tensor(dtype, v1::REDUCE_OP_UNSPECIFIED, kCount,
                                                     {kApart, at, -1}, v1::COLLECTIVE_BROADCAST);
      std::memset(Arena(0) + kApart, 0x5a, bytes);
      const std::vector<std::byte> slot = Run(tensor);
      EXPECT_EQ(slot, Pattern(1, bytes));
      EXPECT_EQ(At(0, kApart, bytes), slot);
      EXPECT_EQ(At(1, kInputAt, bytes), slot);
    }
    for (v1::ReduceOp op : ReduceOpsOf(dtype)) {
      cases += 2;
      SCOPED_TRACE(DataTypeName(dtype) + " " + v1::ReduceOp_Name(op));
      {
        SCOPED_TRACE("reducescatter");
        const std::vector<std::byte> expected =
            Run(Tensor(dtype, op, kCount, {-1, -1, -1}, v1::COLLECTIVE_REDUCESCATTER));
        // Ranks 0 and 2 take their rows elsewhere in their arenas; rank 1
        // reads the slot.
        const negotiation::ReadyTensor tensor =
            Tensor(dtype, op, kCount, {kApart, -1, kApart}, v1::COLLECTIVE_REDUCESCATTER);
        for (int32_t r = 0; r < kRanks; ++r) std::memset(Arena(r) + kApart, 0x5a, bytes);
        EXPECT_EQ(Run(tensor), expected);
        for (int32_t r = 0; r < kRanks; ++r) {
          const RankResult result = ReducescatterOp().ResultOf(tensor, static_cast<size_t>(r));
          const std::vector<std::byte> block(expected.begin() + result.offset,
                                             expected.begin() + result.offset + result.bytes);
          EXPECT_EQ(result.in_output, r != 1);
          EXPECT_EQ(At(r, kApart, result.bytes),
                    r != 1 ? block : std::vector<std::byte>(result.bytes, std::byte{0x5a}))
              << "rank " << r;
        }
      }
      {
        SCOPED_TRACE("reduce");
        const std::vector<std::byte> expected =
            Run(Tensor(dtype, op, kCount, {-1, -1, -1}, v1::COLLECTIVE_REDUCE));
        // The root, rank 1, in place; rank 0's output is not the root's.
        const negotiation::ReadyTensor tensor =
            Tensor(dtype, op, kCount, {kApart, at, -1}, v1::COLLECTIVE_REDUCE);
        std::memset(Arena(0) + kApart, 0x5a, bytes);
        EXPECT_EQ(Run(tensor), expected);
        EXPECT_EQ(At(1, kInputAt, bytes), expected) << "the root's in-place output";
        EXPECT_EQ(At(0, kApart, bytes), untouched) << "rank 0 is not the root";
        EXPECT_TRUE(ReduceOp().ResultOf(tensor, 1).in_output);
        EXPECT_FALSE(ReduceOp().ResultOf(tensor, 0).in_output);
      }
    }
  }
  EXPECT_GE(cases, 90) << "every dtype's broadcast, two reductions with each op";
}

TEST_F(AllreduceOutputTest, InPlaceAcrossManyPiecesRunInAnyOrder) {
  ASSERT_NO_FATAL_FAILURE(MakeClients(12 << 20));
  // Two and a bit pieces: every rank's output is its input.
  const uint64_t count = 2 * kPieceBytes / sizeof(float) + 3;
  const uint64_t bytes = count * sizeof(float);
  const std::vector<std::byte> expected =
      Run(Tensor(v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM, count, {-1, -1, -1}));
  const auto at = static_cast<int64_t>(kInputAt);
  const negotiation::ReadyTensor tensor =
      Tensor(v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM, count, {at, at, at});
  // No rank reads the slot: the result goes only into the outputs.
  EXPECT_TRUE(Run(tensor) == std::vector<std::byte>(bytes, std::byte{0xab}))
      << "the slot, which no rank reads, was written";
  for (int32_t r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(At(r, kInputAt, bytes) == expected) << "rank " << r;
  }
}

TEST_F(AllreduceOutputTest, BroadcastWritesTheRootsBytesIntoEveryOutputAcrossPieces) {
  ASSERT_NO_FATAL_FAILURE(MakeClients(20 << 20));
  // Two and a bit pieces from root 1, which broadcasts in place; rank 0's
  // output is elsewhere in its arena, rank 2 reads the slot.
  const uint64_t bytes = 2 * kPieceBytes + 5;
  constexpr int64_t kApart = 10 << 20;
  const auto at = static_cast<int64_t>(kInputAt);
  const negotiation::ReadyTensor tensor = Tensor(v1::DATA_TYPE_UINT8, v1::REDUCE_OP_UNSPECIFIED,
                                                 bytes, {kApart, at, -1}, v1::COLLECTIVE_BROADCAST);
  const std::vector<std::byte> root = Pattern(1, bytes);
  EXPECT_TRUE(Run(tensor) == root) << "the slot holds the root's bytes for rank 2";
  EXPECT_TRUE(At(0, kApart, bytes) == root) << "rank 0's output";
  EXPECT_TRUE(At(0, kInputAt, bytes) == Pattern(0, bytes)) << "rank 0's input is untouched";
  EXPECT_TRUE(At(1, kInputAt, bytes) == root) << "the root's in-place output";
  EXPECT_TRUE(At(2, kInputAt, bytes) == Pattern(2, bytes)) << "rank 2 named no output";
  EXPECT_TRUE(BroadcastOp().ResultOf(tensor, 0).in_output);
  EXPECT_TRUE(BroadcastOp().ResultOf(tensor, 1).in_output);
  EXPECT_FALSE(BroadcastOp().ResultOf(tensor, 2).in_output);
}

TEST_F(AllreduceOutputTest, ReducescatterWritesEachRanksBlockIntoItsOutput) {
  ASSERT_NO_FATAL_FAILURE(MakeClients(20 << 20));
  // 7 rows among 3 ranks (3, 2 and 2 rows), over two and a bit pieces.
  row_ = (kPieceBytes * 2 / 7 + 33) / sizeof(double);
  const uint64_t count = 7 * row_;
  const uint64_t row_bytes = row_ * sizeof(double);
  const std::vector<std::byte> expected = Run(Tensor(
      v1::DATA_TYPE_FLOAT64, v1::REDUCE_OP_SUM, count, {-1, -1, -1}, v1::COLLECTIVE_REDUCESCATTER));
  constexpr int64_t kOut = 10 << 20;
  const negotiation::ReadyTensor tensor =
      Tensor(v1::DATA_TYPE_FLOAT64, v1::REDUCE_OP_SUM, count, {kOut, -1, kOut + 64},
             v1::COLLECTIVE_REDUCESCATTER);
  EXPECT_TRUE(Run(tensor) == expected) << "the slot holds every block (rank 1 reads it)";
  const std::vector<std::byte> block0(expected.begin(), expected.begin() + 3 * row_bytes);
  const std::vector<std::byte> block2(expected.begin() + 5 * row_bytes, expected.end());
  EXPECT_TRUE(At(0, kOut, 3 * row_bytes) == block0) << "rank 0's rows 0-2";
  EXPECT_TRUE(At(2, kOut + 64, 2 * row_bytes) == block2) << "rank 2's rows 5-6";
  EXPECT_TRUE(At(1, kOut, 64) == std::vector<std::byte>(64)) << "rank 1 named no output";
  EXPECT_TRUE(ReducescatterOp().ResultOf(tensor, 0).in_output);
  EXPECT_FALSE(ReducescatterOp().ResultOf(tensor, 1).in_output);
  EXPECT_TRUE(ReducescatterOp().ResultOf(tensor, 2).in_output);
  EXPECT_EQ(ReducescatterOp().ResultOf(tensor, 2).bytes, 2 * row_bytes);

  // A block over its own input (here rank 2's rows on its input's second
  // row) is refused, naming the rank: pieces run in any order.
  const negotiation::ReadyTensor over =
      Tensor(v1::DATA_TYPE_FLOAT64, v1::REDUCE_OP_SUM, count,
             {-1, -1, static_cast<int64_t>(kInputAt + row_bytes)}, v1::COLLECTIVE_REDUCESCATTER);
  const absl::Status refused = ReducescatterOp().Check(over);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("rank 12's output (arena offset"), std::string::npos)
      << refused.message();
  // Right after the input is fine.
  EXPECT_TRUE(ReducescatterOp()
                  .Check(Tensor(v1::DATA_TYPE_FLOAT64, v1::REDUCE_OP_SUM, count,
                                {-1, -1, static_cast<int64_t>(kInputAt + count * sizeof(double))},
                                v1::COLLECTIVE_REDUCESCATTER))
                  .ok());
}

// Across nodes the outputs get the result once the nodes' combination is in
// (the cross-node plan; multinode_test checks the bits), never a node's
// partial result.
TEST_F(AllreduceOutputTest, APartialResultAcrossNodesStaysInTheSlot) {
  ASSERT_NO_FATAL_FAILURE(MakeClients(64 << 10));
  const int64_t out = 32 << 10;
  for (int32_t r = 0; r < kRanks; ++r) std::memset(Arena(r) + out, 0x5a, 64);
  const std::vector<std::byte> untouched(64, std::byte{0x5a});

  negotiation::ReadyTensor across =
      Tensor(v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM, 16, {out, out, out});
  across.across_nodes = true;
  across.local_members = kRanks;
  (void)Run(across);
  for (int32_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(At(r, out, 64), untouched) << "a partial result must not reach rank " << r;
    EXPECT_TRUE(AllreduceOp().ResultOf(across, static_cast<size_t>(r)).in_output);
  }
}

// Adasum (ops/adasum.cc) writes the outputs too, once the whole tensor is
// combined: an in-place output is its rank's input, which the tree reads to
// the end. Both scopes, every Adasum dtype, bit for bit.
TEST_F(AllreduceOutputTest, AdasumsOutputsMatchTheResultSegmentBitForBit) {
  ASSERT_NO_FATAL_FAILURE(MakeClients(64 << 10));
  constexpr uint64_t kCount = 1000;
  constexpr int64_t kApart = 16 << 10;
  // Adasum needs a power of two of ranks: the first two.
  const auto adasum = [&](v1::DataType dtype, v1::AdasumScope scope,
                          const std::vector<int64_t>& outputs) {
    negotiation::ReadyTensor tensor = Tensor(dtype, v1::REDUCE_OP_ADASUM, kCount, outputs);
    tensor.set_size = 2;
    tensor.submissions.pop_back();
    for (negotiation::Submission& submission : tensor.submissions) {
      submission.request.set_adasum_scope(scope);
    }
    return tensor;
  };
  int cases = 0;
  for (v1::DataType dtype : DataTypes()) {
    if (!IsAdasumType(dtype)) continue;
    for (v1::AdasumScope scope : {v1::ADASUM_SCOPE_RANKS, v1::ADASUM_SCOPE_NODES}) {
      ++cases;
      SCOPED_TRACE(DataTypeName(dtype) + " " + v1::AdasumScope_Name(scope));
      const uint64_t bytes = kCount * ElementSize(dtype);
      const std::vector<std::byte> expected = Run(adasum(dtype, scope, {-1, -1, -1}));
      // Rank 0 in place, rank 1 elsewhere in its arena.
      const negotiation::ReadyTensor tensor =
          adasum(dtype, scope, {static_cast<int64_t>(kInputAt), kApart, -1});
      std::memset(Arena(1) + kApart, 0x5a, bytes);
      EXPECT_EQ(Run(tensor), expected);
      EXPECT_EQ(At(0, kInputAt, bytes), expected) << "rank 0's in-place output";
      EXPECT_EQ(At(1, kApart, bytes), expected) << "rank 1's output";
      EXPECT_EQ(At(1, kInputAt, bytes), Pattern(1, bytes)) << "rank 1's input is untouched";
      EXPECT_TRUE(AllreduceOp().ResultOf(tensor, 0).in_output);
      EXPECT_TRUE(AllreduceOp().ResultOf(tensor, 1).in_output);
    }
  }
  EXPECT_GE(cases, 6) << "float16, float32 and float64 (and bfloat16 if any), both scopes";
}

}  // namespace
}  // namespace collective::daemon::exec::ops
