// exec::Reduce against the scalar reference, bitwise, for every reducible
// (dtype, op), plus the corner cases the contract promises.
#include "daemon/exec/reduce_kernels.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "common/half.h"
#include "tests/common/reference_reduce.h"

namespace collective::daemon::exec {
namespace {

using testing::CompareBitwise;
using testing::FillTestData;
using testing::ReferenceReduce;

constexpr v1::DataType kAllTypes[] = {
    v1::DATA_TYPE_UINT8,   v1::DATA_TYPE_INT8,    v1::DATA_TYPE_UINT16,  v1::DATA_TYPE_INT16,
    v1::DATA_TYPE_INT32,   v1::DATA_TYPE_INT64,   v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16,
    v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_FLOAT64, v1::DATA_TYPE_BOOL};
constexpr v1::ReduceOp kAllOps[] = {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MIN,
                                    v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT, v1::REDUCE_OP_ADASUM};

// k input buffers and an output, each with `offset` spare bytes in front so
// that tests can misalign them on purpose.
struct Buffers {
  Buffers(v1::DataType dtype, v1::ReduceOp op, size_t k, size_t count, size_t skip = 0)
      : element_size(ElementSize(dtype)), offset(skip), storage(k + 1) {
    for (size_t j = 0; j <= k; ++j) {
      storage[j].resize(offset + count * element_size + 1);
      if (j < k) FillTestData(dtype, op, 1000 + j, Input(j), count);
    }
  }
  void* Input(size_t j) { return storage[j].data() + offset; }
  void* Out() { return storage.back().data() + offset; }
  std::vector<const void*> Inputs() {
    std::vector<const void*> inputs;
    for (size_t j = 0; j + 1 < storage.size(); ++j) inputs.push_back(Input(j));
    return inputs;
  }

  size_t element_size;
  size_t offset;
  std::vector<std::vector<char>> storage;
};

// Runs Reduce and ReferenceReduce on the same inputs; returns their difference.
std::string ReduceAndCompare(const exec::ReduceSpec& spec, std::vector<const void*> inputs,
                             size_t count) {
  std::vector<char> expected(count * ElementSize(spec.dtype) + 1);
  std::vector<char> actual(expected.size());
  ReferenceReduce(spec, inputs, expected.data(), count);
  exec::Reduce(spec, inputs, actual.data(), count);
  return CompareBitwise(spec.dtype, expected.data(), actual.data(), count);
}

TEST(IsReducibleTest, MatchesTheContractTable) {
  for (const v1::DataType dtype : kAllTypes) {
    for (const v1::ReduceOp op : kAllOps) {
      const bool numeric_op = op == v1::REDUCE_OP_SUM || op == v1::REDUCE_OP_MIN ||
                              op == v1::REDUCE_OP_MAX || op == v1::REDUCE_OP_PRODUCT;
      const bool expected = dtype == v1::DATA_TYPE_BOOL
                                ? op == v1::REDUCE_OP_MIN || op == v1::REDUCE_OP_MAX
                                : numeric_op;
      EXPECT_EQ(exec::IsReducible(dtype, op), expected)
          << DataTypeName(dtype) << " " << ReduceOpName(op);
    }
  }
  EXPECT_FALSE(exec::IsReducible(v1::DATA_TYPE_UNSPECIFIED, v1::REDUCE_OP_SUM));
  EXPECT_FALSE(exec::IsReducible(v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_UNSPECIFIED));
}

// ---------------------------------------------------------------------------
// Every reducible (dtype, op).

struct TypeAndOp {
  v1::DataType dtype;
  v1::ReduceOp op;
};

void PrintTo(const TypeAndOp& param, std::ostream* os) {
  *os << DataTypeName(param.dtype) << " " << ReduceOpName(param.op);
}

std::vector<TypeAndOp> AllReducible() {
  std::vector<TypeAndOp> cases;
  for (const v1::DataType dtype : kAllTypes) {
    for (const v1::ReduceOp op : kAllOps) {
      if (exec::IsReducible(dtype, op)) cases.push_back({dtype, op});
    }
  }
  return cases;
}

class ReduceTest : public ::testing::TestWithParam<TypeAndOp> {
 protected:
  exec::ReduceSpec Spec(double prescale = 1.0, double postscale = 1.0, int64_t divisor = 1) const {
    return {GetParam().dtype, GetParam().op, prescale, postscale, divisor};
  }
};

struct Scaling {
  double prescale;
  double postscale;
  int64_t divisor;
};

// Each factor alone and all together; fractional so that integer results get
// truncated, and 0.5 * 3 / 4 so that the float factor is not a power of two.
constexpr Scaling kScalings[] = {
    {1.0, 1.0, 1}, {0.5, 1.0, 1}, {1.0, 3.0, 1}, {1.0, 1.0, 3}, {1.25, 0.5, 4}};
constexpr size_t kInputCounts[] = {1, 2, 3, 4, 8};
constexpr size_t kCounts[] = {0, 1, 7, 31, 4096 + 3, 100003};

TEST_P(ReduceTest, MatchesReferenceForEveryShapeAndScaling) {
  for (const size_t k : kInputCounts) {
    for (const size_t count : kCounts) {
      Buffers buffers(GetParam().dtype, GetParam().op, k, count);
      for (const Scaling& s : kScalings) {
        SCOPED_TRACE(::testing::Message()
                     << "k=" << k << " count=" << count << " prescale=" << s.prescale
                     << " postscale=" << s.postscale << " divisor=" << s.divisor);
        EXPECT_EQ(
            ReduceAndCompare(Spec(s.prescale, s.postscale, s.divisor), buffers.Inputs(), count),
            "");
      }
    }
  }
}

TEST_P(ReduceTest, AcceptsUnalignedBuffers) {
  for (const size_t offset : {1, 3}) {
    for (const size_t count : {size_t{61}, size_t{4099}}) {
      Buffers buffers(GetParam().dtype, GetParam().op, 3, count, offset);
      std::vector<const void*> inputs = buffers.Inputs();
      std::vector<char> expected(count * buffers.element_size + 1);
      ReferenceReduce(Spec(), inputs, expected.data(), count);
      exec::Reduce(Spec(), inputs, buffers.Out(), count);
      EXPECT_EQ(CompareBitwise(GetParam().dtype, expected.data(), buffers.Out(), count), "")
          << "offset=" << offset << " count=" << count;
    }
  }
}

// Large enough (4 MiB) to take the streaming-store path, which aligns the output
// first, with the output misaligned by one element. Integers are not scaled:
// scaled integers take a scalar path.
TEST_P(ReduceTest, MatchesReferenceOnLargeRanges) {
  const size_t count = (size_t{4} << 20) / ElementSize(GetParam().dtype) + 4099;
  Buffers buffers(GetParam().dtype, GetParam().op, 2, count + 1);
  std::vector<const void*> inputs = buffers.Inputs();
  for (const void*& input : inputs) input = static_cast<const char*>(input) + buffers.element_size;
  void* out = static_cast<char*>(buffers.Out()) + buffers.element_size;
  const exec::ReduceSpec spec = IsFloatingPoint(GetParam().dtype) ? Spec(0.5, 3.0, 2) : Spec();
  std::vector<char> expected(count * buffers.element_size);
  ReferenceReduce(spec, inputs, expected.data(), count);
  exec::Reduce(spec, inputs, out, count);
  EXPECT_EQ(CompareBitwise(GetParam().dtype, expected.data(), out, count), "");
}

TEST_P(ReduceTest, OutputMayAliasTheFirstInput) {
  for (const size_t count : {size_t{7}, size_t{4099}}) {
    Buffers buffers(GetParam().dtype, GetParam().op, 4, count);
    std::vector<const void*> inputs = buffers.Inputs();
    std::vector<char> expected(count * buffers.element_size + 1);
    ReferenceReduce(Spec(1.25, 0.5, 4), inputs, expected.data(), count);
    exec::Reduce(Spec(1.25, 0.5, 4), inputs, buffers.Input(0), count);
    EXPECT_EQ(CompareBitwise(GetParam().dtype, expected.data(), buffers.Input(0), count), "");
  }
}

TEST_P(ReduceTest, AnySplitOfTheRangeGivesTheSameBits) {
  constexpr size_t kCount = 10007;
  Buffers buffers(GetParam().dtype, GetParam().op, 3, kCount);
  const std::vector<const void*> inputs = buffers.Inputs();
  const exec::ReduceSpec spec = Spec(0.5, 3.0, 1);
  std::vector<char> whole(kCount * buffers.element_size);
  exec::Reduce(spec, inputs, whole.data(), kCount);
  std::vector<char> pieces(whole.size());
  uint64_t random = 12345;
  for (size_t begin = 0; begin < kCount;) {
    random = random * 6364136223846793005ull + 1442695040888963407ull;
    const size_t end = std::min(kCount, begin + (random >> 33) % 97);
    std::vector<const void*> shifted;
    for (const void* input : inputs) {
      shifted.push_back(static_cast<const char*>(input) + begin * buffers.element_size);
    }
    exec::Reduce(spec, shifted, pieces.data() + begin * buffers.element_size, end - begin);
    begin = end;
  }
  EXPECT_EQ(CompareBitwise(GetParam().dtype, whole.data(), pieces.data(), kCount), "");
}

INSTANTIATE_TEST_SUITE_P(AllReducible, ReduceTest, ::testing::ValuesIn(AllReducible()),
                         [](const ::testing::TestParamInfo<TypeAndOp>& param_info) {
                           return DataTypeName(param_info.param.dtype) + "_" +
                                  ReduceOpName(param_info.param.op);
                         });

// ---------------------------------------------------------------------------
// Specific values, checked against hand-written expectations as well as the
// reference.

template <typename T>
std::vector<T> ReduceValues(const exec::ReduceSpec& spec,
                            const std::vector<std::vector<T>>& columns) {
  std::vector<const void*> inputs;
  for (const auto& column : columns) inputs.push_back(column.data());
  const size_t count = columns[0].size();
  std::vector<T> out(count);
  exec::Reduce(spec, inputs, out.data(), count);
  std::vector<T> expected(count);
  ReferenceReduce(spec, inputs, expected.data(), count);
  EXPECT_EQ(CompareBitwise(spec.dtype, expected.data(), out.data(), count), "");
  return out;
}

// Repeats each value so that both the vector body and the scalar tail see it.
template <typename T>
std::vector<T> Repeated(std::vector<T> values) {
  std::vector<T> out;
  for (int copy = 0; copy < 40; ++copy) out.insert(out.end(), values.begin(), values.end());
  return out;
}

uint32_t Bits(float x) { return std::bit_cast<uint32_t>(x); }

TEST(ReduceValuesTest, FloatSumFoldsLeftToRightInInputOrder) {
  const exec::ReduceSpec spec{v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM};
  // (1e8 + -1e8) + 1 = 1, whereas 1e8 + (-1e8 + 1) = 0 in float.
  const auto out = ReduceValues<float>(
      spec, {Repeated<float>({1e8f}), Repeated<float>({-1e8f}), Repeated<float>({1.0f})});
  for (const float x : out) ASSERT_EQ(x, 1.0f);
}

TEST(ReduceValuesTest, MinAndMaxPropagateNanFromAnyInput) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float payload_nan = std::bit_cast<float>(0x7fc12345u);
  for (const v1::ReduceOp op : {v1::REDUCE_OP_MIN, v1::REDUCE_OP_MAX}) {
    const exec::ReduceSpec spec{v1::DATA_TYPE_FLOAT32, op};
    const auto out = ReduceValues<float>(spec, {Repeated<float>({nan, 1.0f, 2.0f, 1.0f}),
                                                Repeated<float>({1.0f, payload_nan, 3.0f, 4.0f}),
                                                Repeated<float>({2.0f, 0.0f, 1.0f, -nan})});
    for (size_t i = 0; i < out.size(); i += 4) {
      EXPECT_EQ(Bits(out[i]), Bits(nan));
      EXPECT_EQ(Bits(out[i + 1]), 0x7fc12345u);  // the NaN's payload survives
      EXPECT_EQ(out[i + 2], op == v1::REDUCE_OP_MIN ? 1.0f : 3.0f);
      EXPECT_EQ(Bits(out[i + 3]), Bits(-nan));
    }
  }
}

// Which NaN comes out must not depend on the compiler's operand order, nor on
// whether an element fell in a vector body or a scalar tail.
TEST(ReduceValuesTest, TwoNansGiveTheLeftOneMadeQuiet) {
  const float left = std::bit_cast<float>(0x7f812345u);  // signalling
  const float right = std::bit_cast<float>(0xffc54321u);
  const double left64 = std::bit_cast<double>(0x7ff0000000000123ull);
  const double right64 = std::bit_cast<double>(0xfff8000000000456ull);
  for (const v1::ReduceOp op : {v1::REDUCE_OP_SUM, v1::REDUCE_OP_PRODUCT}) {
    for (const double prescale : {1.0, 2.0}) {
      const auto out =
          ReduceValues<float>({v1::DATA_TYPE_FLOAT32, op, prescale},
                              {Repeated<float>({left, 1.0f}), Repeated<float>({right, right})});
      const auto out64 = ReduceValues<double>(
          {v1::DATA_TYPE_FLOAT64, op, prescale},
          {Repeated<double>({left64, 1.0}), Repeated<double>({right64, right64})});
      for (size_t i = 0; i < out.size(); i += 2) {
        EXPECT_EQ(Bits(out[i]), 0x7fc12345u);
        EXPECT_EQ(Bits(out[i + 1]), 0xffc54321u);
        EXPECT_EQ(std::bit_cast<uint64_t>(out64[i]), 0x7ff8000000000123ull);
        EXPECT_EQ(std::bit_cast<uint64_t>(out64[i + 1]), 0xfff8000000000456ull);
      }
    }
  }
}

TEST(ReduceValuesTest, NanPropagatesThroughEveryFloatType) {
  for (const v1::DataType dtype : {v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16,
                                   v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_FLOAT64}) {
    for (const v1::ReduceOp op :
         {v1::REDUCE_OP_SUM, v1::REDUCE_OP_PRODUCT, v1::REDUCE_OP_MIN, v1::REDUCE_OP_MAX}) {
      constexpr size_t kCount = 100;
      Buffers buffers(dtype, op, 3, kCount);
      // A NaN in one input per element, at a position that varies.
      for (size_t i = 0; i < kCount; i += 3) {
        void* at = static_cast<char*>(buffers.Input(i / 3 % 3)) + i * buffers.element_size;
        const float nan = std::numeric_limits<float>::quiet_NaN();
        const double nan64 = std::numeric_limits<double>::quiet_NaN();
        const uint16_t half_nan = dtype == v1::DATA_TYPE_FLOAT16 ? 0x7e00 : 0x7fc0;
        if (buffers.element_size == 2) std::memcpy(at, &half_nan, 2);
        if (buffers.element_size == 4) std::memcpy(at, &nan, 4);
        if (buffers.element_size == 8) std::memcpy(at, &nan64, 8);
      }
      const exec::ReduceSpec spec{dtype, op, 0.5, 3.0, 2};
      std::vector<char> out(kCount * buffers.element_size);
      exec::Reduce(spec, buffers.Inputs(), out.data(), kCount);
      std::vector<char> expected(out.size());
      ReferenceReduce(spec, buffers.Inputs(), expected.data(), kCount);
      EXPECT_EQ(CompareBitwise(dtype, expected.data(), out.data(), kCount), "");
      for (size_t i = 0; i < kCount; i += 3) {
        const char* at = out.data() + i * buffers.element_size;
        double value = 0;
        if (buffers.element_size == 2) {
          uint16_t bits;
          std::memcpy(&bits, at, 2);
          value = dtype == v1::DATA_TYPE_FLOAT16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
        } else if (buffers.element_size == 4) {
          float f;
          std::memcpy(&f, at, 4);
          value = f;
        } else {
          std::memcpy(&value, at, 8);
        }
        EXPECT_TRUE(std::isnan(value))
            << DataTypeName(dtype) << " " << ReduceOpName(op) << " " << i;
      }
    }
  }
}

TEST(ReduceValuesTest, NegativeZeroOrdersBelowPositiveZero) {
  const auto min =
      ReduceValues<float>({v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_MIN},
                          {Repeated<float>({0.0f, -0.0f}), Repeated<float>({-0.0f, 0.0f})});
  const auto max =
      ReduceValues<float>({v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_MAX},
                          {Repeated<float>({0.0f, -0.0f}), Repeated<float>({-0.0f, 0.0f})});
  for (size_t i = 0; i < min.size(); ++i) {
    EXPECT_TRUE(std::signbit(min[i])) << i;
    EXPECT_FALSE(std::signbit(max[i])) << i;
  }
}

TEST(ReduceValuesTest, IntegersWrapAround) {
  const auto sum32 = ReduceValues<int32_t>(
      {v1::DATA_TYPE_INT32, v1::REDUCE_OP_SUM},
      {Repeated<int32_t>({std::numeric_limits<int32_t>::max()}), Repeated<int32_t>({1})});
  for (const int32_t x : sum32) ASSERT_EQ(x, std::numeric_limits<int32_t>::min());
  const auto sum8 = ReduceValues<uint8_t>({v1::DATA_TYPE_UINT8, v1::REDUCE_OP_SUM},
                                          {Repeated<uint8_t>({200}), Repeated<uint8_t>({100})});
  for (const uint8_t x : sum8) ASSERT_EQ(x, 44);
  const auto product8 =
      ReduceValues<int8_t>({v1::DATA_TYPE_INT8, v1::REDUCE_OP_PRODUCT},
                           {Repeated<int8_t>({-128, 16}), Repeated<int8_t>({-1, 17})});
  for (size_t i = 0; i < product8.size(); i += 2) {
    ASSERT_EQ(product8[i], -128);
    ASSERT_EQ(product8[i + 1], 16);  // 272 mod 256
  }
  const auto product16 =
      ReduceValues<uint16_t>({v1::DATA_TYPE_UINT16, v1::REDUCE_OP_PRODUCT},
                             {Repeated<uint16_t>({65535}), Repeated<uint16_t>({65535})});
  for (const uint16_t x : product16) ASSERT_EQ(x, 1);
  const int64_t big = int64_t{1} << 40;
  const auto product64 =
      ReduceValues<int64_t>({v1::DATA_TYPE_INT64, v1::REDUCE_OP_PRODUCT},
                            {Repeated<int64_t>({big + 3, -7}), Repeated<int64_t>({big + 5, 9})});
  for (size_t i = 0; i < product64.size(); i += 2) {
    ASSERT_EQ(product64[i], static_cast<int64_t>((8ull << 40) + 15));  // 2^80 wraps away
    ASSERT_EQ(product64[i + 1], -63);
  }
}

TEST(ReduceValuesTest, ScaledIntegersTruncateAndSaturate) {
  const auto pre =
      ReduceValues<int8_t>({v1::DATA_TYPE_INT8, v1::REDUCE_OP_SUM, 100.0},
                           {Repeated<int8_t>({2, -2, 1, 0}), Repeated<int8_t>({0, 0, 0, 0})});
  for (size_t i = 0; i < pre.size(); i += 4) {
    EXPECT_EQ(pre[i], 127);
    EXPECT_EQ(pre[i + 1], -128);
    EXPECT_EQ(pre[i + 2], 100);
    EXPECT_EQ(pre[i + 3], 0);
  }
  // Average of int32: 7 / 2 = 3.5 truncates to 3, -7 / 2 to -3.
  const auto average =
      ReduceValues<int32_t>({v1::DATA_TYPE_INT32, v1::REDUCE_OP_SUM, 1.0, 1.0, 2},
                            {Repeated<int32_t>({3, -3}), Repeated<int32_t>({4, -4})});
  for (size_t i = 0; i < average.size(); i += 2) {
    EXPECT_EQ(average[i], 3);
    EXPECT_EQ(average[i + 1], -3);
  }
  const double inf = std::numeric_limits<double>::infinity();
  const auto saturated = ReduceValues<int64_t>({v1::DATA_TYPE_INT64, v1::REDUCE_OP_MAX, 1.0, inf},
                                               {Repeated<int64_t>({5, -5, 0})});
  for (size_t i = 0; i < saturated.size(); i += 3) {
    EXPECT_EQ(saturated[i], std::numeric_limits<int64_t>::max());
    EXPECT_EQ(saturated[i + 1], std::numeric_limits<int64_t>::min());
    EXPECT_EQ(saturated[i + 2], 0);  // 0 * inf is NaN
  }
  const auto unsigned_negative =
      ReduceValues<uint16_t>({v1::DATA_TYPE_UINT16, v1::REDUCE_OP_SUM, -1.0},
                             {Repeated<uint16_t>({5}), Repeated<uint16_t>({7})});
  for (const uint16_t x : unsigned_negative) EXPECT_EQ(x, 0);
}

TEST(ReduceValuesTest, BoolMinIsAndMaxIsOrOverNonZeroBytes) {
  const std::vector<std::vector<uint8_t>> columns = {Repeated<uint8_t>({0, 2, 255, 0, 1}),
                                                     Repeated<uint8_t>({0, 255, 0, 7, 1})};
  const auto min = ReduceValues<uint8_t>({v1::DATA_TYPE_BOOL, v1::REDUCE_OP_MIN}, columns);
  const auto max = ReduceValues<uint8_t>({v1::DATA_TYPE_BOOL, v1::REDUCE_OP_MAX}, columns);
  const std::vector<uint8_t> expected_min = Repeated<uint8_t>({0, 1, 0, 0, 1});
  const std::vector<uint8_t> expected_max = Repeated<uint8_t>({0, 1, 1, 1, 1});
  EXPECT_EQ(min, expected_min);
  EXPECT_EQ(max, expected_max);
}

// float16 and bfloat16 round once, from float32, to nearest even.
TEST(ReduceValuesTest, HalfResultsRoundToNearestEven) {
  const exec::ReduceSpec sum{v1::DATA_TYPE_FLOAT16, v1::REDUCE_OP_SUM};
  // 1 + 2^-11 is a tie: stays at 1 (even); (1 + 2^-10) + 2^-11 rounds up to
  // the even 1 + 2^-9; 65504 + 16 overflows to inf, 65504 + 8 does not; two
  // subnormals add exactly.
  const auto out = ReduceValues<uint16_t>(
      sum, {Repeated<uint16_t>({0x3c00, 0x3c01, 0x7bff, 0x7bff, 0x0001, 0xfbff}),
            Repeated<uint16_t>({0x1000, 0x1000, 0x4c00, 0x4800, 0x0001, 0xcc00})});
  const auto expected = Repeated<uint16_t>({0x3c00, 0x3c02, 0x7c00, 0x7bff, 0x0002, 0xfc00});
  EXPECT_EQ(out, expected);
  // Halving the smallest subnormals: 2^-25 ties down to 0, 1.5 * 2^-24 to 2.
  const auto halved = ReduceValues<uint16_t>({v1::DATA_TYPE_FLOAT16, v1::REDUCE_OP_SUM, 1.0, 0.5},
                                             {Repeated<uint16_t>({0x0001, 0x0003, 0x8001})});
  EXPECT_EQ(halved, Repeated<uint16_t>({0x0000, 0x0002, 0x8000}));
}

TEST(ReduceValuesTest, BFloat16ResultsRoundToNearestEven) {
  const exec::ReduceSpec sum{v1::DATA_TYPE_BFLOAT16, v1::REDUCE_OP_SUM};
  // 1 + 2^-8 ties to 1; (1 + 2^-7) + 2^-8 ties up to 1 + 2^-6; the largest
  // finite value plus half an ulp ties up to inf.
  const auto out =
      ReduceValues<uint16_t>(sum, {Repeated<uint16_t>({0x3f80, 0x3f81, 0x7f7f, 0x7f7e}),
                                   Repeated<uint16_t>({0x3b80, 0x3b80, 0x7b00, 0x7b00})});
  EXPECT_EQ(out, Repeated<uint16_t>({0x3f80, 0x3f82, 0x7f80, 0x7f7e}));
  const auto halved = ReduceValues<uint16_t>({v1::DATA_TYPE_BFLOAT16, v1::REDUCE_OP_SUM, 1.0, 0.5},
                                             {Repeated<uint16_t>({0x0001, 0x0003, 0x8001})});
  EXPECT_EQ(halved, Repeated<uint16_t>({0x0000, 0x0002, 0x8000}));
}

// Every 16-bit pattern through the kernel's wide conversions, alone and with
// arithmetic, against the scalar conversions of common/half.h.
TEST(ReduceValuesTest, WideHalfConversionsMatchScalarOnEveryPattern) {
  std::vector<uint16_t> all(65536);
  std::vector<uint16_t> shuffled(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    all[i] = static_cast<uint16_t>(i);
    shuffled[i] = static_cast<uint16_t>(i * 40503u);
  }
  for (const v1::DataType dtype : {v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16}) {
    SCOPED_TRACE(DataTypeName(dtype));
    const auto same = ReduceValues<uint16_t>({dtype, v1::REDUCE_OP_MAX}, {all});
    for (uint32_t i = 0; i < 65536; ++i) {
      const float wide =
          dtype == v1::DATA_TYPE_FLOAT16 ? HalfToFloat(all[i]) : BFloat16ToFloat(all[i]);
      if (!std::isnan(wide)) {
        ASSERT_EQ(same[i], all[i]) << i;
      }
    }
    for (const v1::ReduceOp op : {v1::REDUCE_OP_SUM, v1::REDUCE_OP_PRODUCT, v1::REDUCE_OP_MIN}) {
      ReduceValues<uint16_t>({dtype, op, 1.0, 0.3}, {all, shuffled});
    }
  }
}

}  // namespace
}  // namespace collective::daemon::exec
