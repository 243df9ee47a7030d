// daemon/ops/work_list: copies and reductions cut into pieces of at most
// kPieceBytes (kCopyPieceBytes with copies), whose results (run in any order) equal one big
// operation, the byte accounting, and the zeros input that stands for joined ranks and is read at
// the same place for every piece.
#include "daemon/exec/ops/work_list.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <ostream>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "daemon/exec/adasum_kernel.h"
#include "tests/common/reference_reduce.h"

namespace collective::daemon::exec::ops {
namespace {

std::vector<std::byte> Pattern(uint64_t bytes, uint8_t seed) {
  std::vector<std::byte> data(bytes);
  for (uint64_t i = 0; i < bytes; ++i) data[i] = std::byte(static_cast<uint8_t>(i * 7 + seed));
  return data;
}

// Runs the pieces last first, so that no piece relies on another before it.
void RunBackwards(const WorkList& work) {
  for (size_t i = work.size(); i-- > 0;) work.Run(i);
}

class WorkListTest : public ::testing::Test {
 protected:
  // kPieceBytes of zeros, followed by bytes that are not zero: a piece that
  // advanced the zeros pointer would read them.
  WorkListTest() : zeros_(3 * kPieceBytes, std::byte{0x5a}) {
    std::memset(zeros_.data(), 0, kPieceBytes);
  }
  const std::byte* zeros() const { return zeros_.data(); }

  std::vector<std::byte> zeros_;
};

TEST_F(WorkListTest, PieceBytesIsFourMebibytes) { EXPECT_EQ(kPieceBytes, uint64_t{4} << 20); }

TEST_F(WorkListTest, StartsEmpty) {
  const WorkList work(zeros());
  EXPECT_EQ(work.size(), 0u);
  EXPECT_EQ(work.bytes(), 0u);
  EXPECT_EQ(work.zeros(), zeros());
}

TEST_F(WorkListTest, CopiesAreCutAtPieceBytes) {
  struct Case {
    uint64_t bytes;
    size_t pieces;
  };
  for (const Case c : {Case{0, 0}, Case{1, 1}, Case{kPieceBytes - 1, 1}, Case{kPieceBytes, 1},
                       Case{kPieceBytes + 1, 2}, Case{2 * kPieceBytes, 2},
                       Case{2 * kPieceBytes + kPieceBytes / 2, 3}}) {
    WorkList work(zeros());
    const std::vector<std::byte> source = Pattern(c.bytes, 3);
    // One guard byte on each side of the destination.
    std::vector<std::byte> destination(c.bytes + 2, std::byte{0xee});
    work.AddCopy(destination.data() + 1, source.data(), c.bytes);
    EXPECT_EQ(work.size(), c.pieces) << c.bytes;
    EXPECT_EQ(work.bytes(), c.bytes);
    RunBackwards(work);
    EXPECT_EQ(destination.front(), std::byte{0xee});
    EXPECT_EQ(destination.back(), std::byte{0xee}) << c.bytes << ": wrote past the end";
    // Not memcmp: the empty case's source has no data pointer to pass it.
    EXPECT_TRUE(std::equal(source.begin(), source.end(), destination.begin() + 1)) << c.bytes;
  }
}

TEST_F(WorkListTest, OperationsAccumulate) {
  WorkList work(zeros());
  std::vector<std::byte> a = Pattern(100, 1);
  std::vector<std::byte> b = Pattern(kPieceBytes + 8, 2);
  std::vector<std::byte> out(a.size() + b.size());
  work.AddCopy(out.data(), a.data(), a.size());
  work.AddCopy(out.data() + a.size(), b.data(), b.size());
  EXPECT_EQ(work.size(), 3u);
  EXPECT_EQ(work.bytes(), a.size() + b.size());

  // A reduction counts its inputs and its output.
  std::vector<float> x(10, 1.0f);
  std::vector<float> y(10, 2.0f);
  std::vector<float> sum(10);
  const exec::ReduceSpec spec{.dtype = v1::DATA_TYPE_FLOAT32};
  work.AddReduce(
      spec,
      {reinterpret_cast<const std::byte*>(x.data()), reinterpret_cast<const std::byte*>(y.data())},
      reinterpret_cast<std::byte*>(sum.data()), 10);
  EXPECT_EQ(work.size(), 4u);
  EXPECT_EQ(work.bytes(), a.size() + b.size() + 10 * 4 * 3);
  RunBackwards(work);
  EXPECT_EQ(std::memcmp(out.data(), a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(out.data() + a.size(), b.data(), b.size()), 0);
  EXPECT_EQ(sum, std::vector<float>(10, 3.0f));
}

// A reduction cut into pieces gives the bits that one Reduce over the whole
// range gives.
struct ReduceCase {
  v1::DataType dtype;
  v1::ReduceOp op;
  uint64_t count;
  size_t pieces;
};

void PrintTo(const ReduceCase& reduce_case, std::ostream* os) {
  *os << reduce_case.count << " elements, " << reduce_case.pieces << " pieces";
}

class WorkListReduceTest : public WorkListTest, public ::testing::WithParamInterface<ReduceCase> {};

TEST_P(WorkListReduceTest, PiecesEqualOneBigReduction) {
  const ReduceCase& c = GetParam();
  const uint64_t element = ElementSize(c.dtype);
  const uint64_t bytes = c.count * element;
  std::vector<std::vector<std::byte>> inputs(3, std::vector<std::byte>(bytes));
  for (size_t i = 0; i < inputs.size(); ++i) {
    testing::FillTestData(c.dtype, c.op, i + 1, inputs[i].data(), c.count);
  }
  const exec::ReduceSpec spec{
      .dtype = c.dtype, .op = c.op, .prescale = 0.5, .postscale = 3.0, .divisor = 3};
  WorkList::Inputs pointers;
  std::vector<const void*> whole;
  for (const auto& input : inputs) {
    pointers.push_back(input.data());
    whole.push_back(input.data());
  }
  std::vector<std::byte> out(bytes + 1, std::byte{0xee});
  WorkList work(zeros());
  work.AddReduce(spec, pointers, out.data(), c.count);
  EXPECT_EQ(work.size(), c.pieces);
  EXPECT_EQ(work.bytes(), bytes * 4);
  RunBackwards(work);
  EXPECT_EQ(out.back(), std::byte{0xee}) << "wrote past the end";

  std::vector<std::byte> expected(bytes);
  exec::Reduce(spec, whole, expected.data(), c.count);
  EXPECT_EQ(testing::CompareBitwise(c.dtype, expected.data(), out.data(), c.count), "");
}

constexpr uint64_t kFloats = kPieceBytes / 4;

INSTANTIATE_TEST_SUITE_P(
    Sizes, WorkListReduceTest,
    ::testing::Values(ReduceCase{v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM, 0, 0},
                      ReduceCase{v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM, 1, 1},
                      ReduceCase{v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM, kFloats, 1},
                      ReduceCase{v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM, kFloats + 1, 2},
                      ReduceCase{v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_MAX, 2 * kFloats + 3, 3},
                      ReduceCase{v1::DATA_TYPE_FLOAT64, v1::REDUCE_OP_SUM, kFloats + 5, 3},
                      ReduceCase{v1::DATA_TYPE_FLOAT16, v1::REDUCE_OP_SUM, 2 * kFloats + 7, 2},
                      ReduceCase{v1::DATA_TYPE_BFLOAT16, v1::REDUCE_OP_PRODUCT, 2 * kFloats, 1},
                      ReduceCase{v1::DATA_TYPE_INT8, v1::REDUCE_OP_SUM, 4 * kFloats + 1, 2},
                      ReduceCase{v1::DATA_TYPE_INT64, v1::REDUCE_OP_MIN, kFloats, 2}),
    [](const auto& param_info) {
      return std::string(v1::DataType_Name(param_info.param.dtype).substr(10)) + "_" +
             std::to_string(param_info.param.count);
    });

// An in-place allreduce into clients' arenas: the copies are the inputs
// themselves (and one apart from them, large enough to be written with
// streaming stores), each written block by block as the block is reduced,
// and each ends with the bits of one big reduction of the inputs as they
// were.
TEST_F(WorkListTest, CopiesOverTheInputsGetTheReductionOfTheOriginalInputs) {
  // Pieces of kCopyPieceBytes, the last ending inside a block; a joined
  // rank's zeros.
  static_assert(kFloats * 4 >= kStreamCopyBytes);
  const uint64_t count = kFloats + 3 * (kCopyBlockBytes / 4) + 5;
  const v1::DataType dtype = v1::DATA_TYPE_FLOAT32;
  const exec::ReduceSpec spec{
      .dtype = dtype, .op = v1::REDUCE_OP_SUM, .prescale = 0.5, .postscale = 3.0, .divisor = 3};
  std::vector<std::vector<std::byte>> inputs(2, std::vector<std::byte>(count * 4));
  for (size_t i = 0; i < inputs.size(); ++i) {
    testing::FillTestData(dtype, spec.op, i + 1, inputs[i].data(), count);
  }
  std::vector<std::byte> expected(count * 4);
  const std::vector<std::byte> zeros(count * 4, std::byte{0});
  exec::Reduce(spec, std::vector<const void*>{inputs[0].data(), zeros.data(), inputs[1].data()},
               expected.data(), count);

  std::vector<std::byte> slot(count * 4 + 1, std::byte{0xee});
  std::vector<std::byte> apart(count * 4 + 1, std::byte{0xee});
  WorkList work(this->zeros());
  work.AddReduce(spec, {inputs[0].data(), this->zeros(), inputs[1].data()}, slot.data(), count,
                 {inputs[1].data(), apart.data(), inputs[0].data()});
  ASSERT_EQ(work.size(), (count * 4 + kCopyPieceBytes - 1) / kCopyPieceBytes);
  ASSERT_NE(count * 4 % kCopyPieceBytes % kCopyBlockBytes, 0u);
  RunBackwards(work);
  EXPECT_EQ(slot.back(), std::byte{0xee}) << "wrote past the slot";
  EXPECT_EQ(apart.back(), std::byte{0xee}) << "wrote past a copy";
  EXPECT_EQ(testing::CompareBitwise(dtype, expected.data(), slot.data(), count), "");
  EXPECT_EQ(testing::CompareBitwise(dtype, expected.data(), apart.data(), count), "");
  EXPECT_EQ(testing::CompareBitwise(dtype, expected.data(), inputs[0].data(), count), "");
  EXPECT_EQ(testing::CompareBitwise(dtype, expected.data(), inputs[1].data(), count), "");

  // Without an `out` (no slot): the copies alone receive it.
  for (size_t i = 0; i < inputs.size(); ++i) {
    testing::FillTestData(dtype, spec.op, i + 1, inputs[i].data(), count);
  }
  std::fill(apart.begin(), apart.end(), std::byte{0xee});
  WorkList copies_only(this->zeros());
  copies_only.AddReduce(spec, {inputs[0].data(), this->zeros(), inputs[1].data()}, nullptr, count,
                        {inputs[1].data(), apart.data(), inputs[0].data()});
  RunBackwards(copies_only);
  EXPECT_EQ(apart.back(), std::byte{0xee}) << "wrote past a copy";
  EXPECT_EQ(testing::CompareBitwise(dtype, expected.data(), apart.data(), count), "");
  EXPECT_EQ(testing::CompareBitwise(dtype, expected.data(), inputs[0].data(), count), "");
  EXPECT_EQ(testing::CompareBitwise(dtype, expected.data(), inputs[1].data(), count), "");
}

// Adasum is one piece; its copies (here its inputs themselves and one apart,
// large enough to be written with streaming stores) are written once the
// whole tensor is combined, so each gets the Adasum of the inputs as they
// were.
TEST_F(WorkListTest, AdasumsCopiesGetTheCombinationOfTheOriginalInputs) {
  const uint64_t count = kStreamCopyBytes / 4 + 3;
  const v1::DataType dtype = v1::DATA_TYPE_FLOAT32;
  const exec::ReduceSpec spec{.dtype = dtype, .op = v1::REDUCE_OP_ADASUM, .postscale = 0.5};
  std::vector<std::vector<std::byte>> inputs(2, std::vector<std::byte>(count * 4));
  for (size_t i = 0; i < inputs.size(); ++i) {
    testing::FillTestData(dtype, v1::REDUCE_OP_SUM, i + 1, inputs[i].data(), count);
  }
  std::vector<std::byte> expected(count * 4);
  const std::vector<const void*> originals{inputs[0].data(), inputs[1].data()};
  exec::Adasum(dtype, originals, expected.data(), count, 1.0, 0.5);

  std::vector<std::byte> slot(count * 4 + 1, std::byte{0xee});
  std::vector<std::byte> apart(count * 4 + 1, std::byte{0xee});
  WorkList work(this->zeros());
  work.AddAdasum(spec, {inputs[0].data(), inputs[1].data()}, slot.data(), count,
                 {inputs[1].data(), apart.data(), inputs[0].data()});
  ASSERT_EQ(work.size(), 1u);
  RunBackwards(work);
  EXPECT_EQ(slot.back(), std::byte{0xee}) << "wrote past the slot";
  EXPECT_EQ(apart.back(), std::byte{0xee}) << "wrote past a copy";
  for (const std::vector<std::byte>* got : {&slot, &apart, &inputs[0], &inputs[1]}) {
    EXPECT_EQ(testing::CompareBitwise(dtype, expected.data(), got->data(), count), "");
  }
}

TEST_F(WorkListTest, TheZerosInputIsNotAdvanced) {
  // 2.5 pieces of float32; the second input is a joined rank's.
  const uint64_t count = 2 * kFloats + kFloats / 2;
  std::vector<float> a(count);
  std::vector<float> b(count);
  std::iota(a.begin(), a.end(), 1.0f);
  for (uint64_t i = 0; i < count; ++i) b[i] = static_cast<float>(i % 97);
  std::vector<float> out(count, -1.0f);
  WorkList work(zeros());
  work.AddReduce({.dtype = v1::DATA_TYPE_FLOAT32, .op = v1::REDUCE_OP_SUM},
                 {reinterpret_cast<const std::byte*>(a.data()), zeros(),
                  reinterpret_cast<const std::byte*>(b.data())},
                 reinterpret_cast<std::byte*>(out.data()), count);
  ASSERT_EQ(work.size(), 3u);
  RunBackwards(work);
  uint64_t wrong = 0;
  uint64_t first_wrong = count;
  for (uint64_t i = 0; i < count; ++i) {
    if (out[i] != a[i] + b[i]) {
      if (wrong++ == 0) first_wrong = i;
    }
  }
  EXPECT_EQ(wrong, 0u) << "first at element " << first_wrong << " (piece "
                       << first_wrong * 4 / kPieceBytes << ")";
}

TEST_F(WorkListTest, AllInputsZerosGivesZeros) {
  // Every rank but none joined: an allreduce whose inputs are all zeros
  // (the MIN of zeros, over two pieces).
  const uint64_t count = kPieceBytes / 8 + 10;
  std::vector<double> out(count, 5.0);
  WorkList work(zeros());
  work.AddReduce({.dtype = v1::DATA_TYPE_FLOAT64, .op = v1::REDUCE_OP_MIN}, {zeros(), zeros()},
                 reinterpret_cast<std::byte*>(out.data()), count);
  ASSERT_EQ(work.size(), 2u);
  RunBackwards(work);
  EXPECT_EQ(out, std::vector<double>(count, 0.0));
}

}  // namespace
}  // namespace collective::daemon::exec::ops
