// exec::Adasum against a reference written here from the formula: a
// recursive combination of a list of vectors, halves first, in double with
// each level's result rounded to the tensor's type.
#include "daemon/exec/adasum_kernel.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "common/half.h"

namespace collective::daemon::exec {
namespace {

// A value as the tensor's type stores it.
double RoundTo(v1::DataType dtype, double value) {
  switch (dtype) {
    case v1::DATA_TYPE_FLOAT16:
      return HalfToFloat(FloatToHalf(static_cast<float>(value)));
    case v1::DATA_TYPE_BFLOAT16:
      return BFloat16ToFloat(FloatToBFloat16(static_cast<float>(value)));
    case v1::DATA_TYPE_FLOAT32:
      return static_cast<float>(value);
    default:
      return value;
  }
}

std::vector<std::byte> Encode(v1::DataType dtype, const std::vector<double>& values) {
  std::vector<std::byte> bytes(values.size() * ElementSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    std::byte* at = bytes.data() + i * ElementSize(dtype);
    if (dtype == v1::DATA_TYPE_FLOAT16 || dtype == v1::DATA_TYPE_BFLOAT16) {
      const float f = static_cast<float>(values[i]);
      const uint16_t h = dtype == v1::DATA_TYPE_FLOAT16 ? FloatToHalf(f) : FloatToBFloat16(f);
      std::memcpy(at, &h, sizeof h);
    } else if (dtype == v1::DATA_TYPE_FLOAT32) {
      const float f = static_cast<float>(values[i]);
      std::memcpy(at, &f, sizeof f);
    } else {
      std::memcpy(at, &values[i], sizeof(double));
    }
  }
  return bytes;
}

std::vector<double> Decode(v1::DataType dtype, const std::vector<std::byte>& bytes) {
  std::vector<double> values(bytes.size() / ElementSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const std::byte* at = bytes.data() + i * ElementSize(dtype);
    if (dtype == v1::DATA_TYPE_FLOAT16 || dtype == v1::DATA_TYPE_BFLOAT16) {
      uint16_t h;
      std::memcpy(&h, at, sizeof h);
      values[i] = dtype == v1::DATA_TYPE_FLOAT16 ? HalfToFloat(h) : BFloat16ToFloat(h);
    } else if (dtype == v1::DATA_TYPE_FLOAT32) {
      float f;
      std::memcpy(&f, at, sizeof f);
      values[i] = f;
    } else {
      std::memcpy(&values[i], at, sizeof(double));
    }
  }
  return values;
}

// Adasum(a, b) = (1 - a·b / 2‖a‖²) a + (1 - a·b / 2‖b‖²) b, a coefficient
// being 1 when its ‖·‖² is below 1e-8; a list combines as Adasum(left half,
// right half).
std::vector<double> ReferenceAdasum(v1::DataType dtype, const std::vector<std::vector<double>>& v) {
  if (v.size() == 1) return v.front();
  const size_t half = v.size() / 2;
  const std::vector<double> a = ReferenceAdasum(dtype, {v.begin(), v.begin() + half});
  const std::vector<double> b = ReferenceAdasum(dtype, {v.begin() + half, v.end()});
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double ca = aa < 1e-8 ? 1.0 : 1.0 - dot / (2 * aa);
  const double cb = bb < 1e-8 ? 1.0 : 1.0 - dot / (2 * bb);
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = RoundTo(dtype, ca * a[i] + cb * b[i]);
  return out;
}

// Relative to the result's largest magnitude: the rounding of a few levels.
double Tolerance(v1::DataType dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_FLOAT16:
      return 8e-3;
    case v1::DATA_TYPE_BFLOAT16:
      return 6e-2;
    case v1::DATA_TYPE_FLOAT32:
      return 1e-5;
    default:
      return 1e-12;
  }
}

std::vector<double> RunKernel(v1::DataType dtype, const std::vector<std::vector<double>>& inputs,
                              double prescale = 1.0, double postscale = 1.0) {
  std::vector<std::vector<std::byte>> encoded;
  std::vector<const void*> pointers;
  for (const std::vector<double>& input : inputs) encoded.push_back(Encode(dtype, input));
  for (const std::vector<std::byte>& bytes : encoded) pointers.push_back(bytes.data());
  std::vector<std::byte> out(inputs.front().size() * ElementSize(dtype));
  Adasum(dtype, pointers, out.data(), inputs.front().size(), prescale, postscale);
  return Decode(dtype, out);
}

// Inputs that share a direction (so the coefficients are far from 1) plus
// noise, each already representable in `dtype`.
std::vector<std::vector<double>> MakeInputs(v1::DataType dtype, size_t ranks, size_t count,
                                            uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> shared(count);
  for (double& x : shared) x = uniform(generator);
  std::vector<std::vector<double>> inputs(ranks, std::vector<double>(count));
  for (size_t r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < count; ++i) {
      inputs[r][i] = RoundTo(dtype, (0.5 + 0.25 * r) * shared[i] + uniform(generator));
    }
  }
  return inputs;
}

void ExpectNear(v1::DataType dtype, const std::vector<double>& actual,
                const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  double scale = 0;
  for (double x : expected) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], Tolerance(dtype) * scale)
        << "element " << i << " of " << DataTypeName(dtype);
  }
}

constexpr v1::DataType kTypes[] = {v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16,
                                   v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_FLOAT64};

TEST(AdasumKernelTest, MatchesTheRecursiveReferenceForPowerOfTwoRankCounts) {
  for (v1::DataType dtype : kTypes) {
    for (size_t ranks : {1, 2, 4, 8}) {
      for (size_t count : {1, 7, 1000}) {
        SCOPED_TRACE(DataTypeName(dtype) + " ranks " + std::to_string(ranks) + " count " +
                     std::to_string(count));
        const auto inputs = MakeInputs(dtype, ranks, count, static_cast<uint32_t>(ranks + count));
        ExpectNear(dtype, RunKernel(dtype, inputs), ReferenceAdasum(dtype, inputs));
      }
    }
  }
}

TEST(AdasumKernelTest, PairsNeighboursFirstAsHorovodsExchangeDoes) {
  // ((0,1),(2,3)) differs from ((0,2),(1,3)) for these inputs: the result
  // must be the former's.
  const std::vector<std::vector<double>> inputs = {{1, 0}, {1, 0}, {0, 1}, {2, 2}};
  const std::vector<double> result = RunKernel(v1::DATA_TYPE_FLOAT64, inputs);
  const std::vector<double> reordered =
      ReferenceAdasum(v1::DATA_TYPE_FLOAT64, {inputs[0], inputs[2], inputs[1], inputs[3]});
  ExpectNear(v1::DATA_TYPE_FLOAT64, result, ReferenceAdasum(v1::DATA_TYPE_FLOAT64, inputs));
  EXPECT_GT(std::abs(result[0] - reordered[0]) + std::abs(result[1] - reordered[1]), 0.1);
}

TEST(AdasumKernelTest, EqualVectorsGiveThemselvesAndOrthogonalOnesTheirSum) {
  EXPECT_EQ(RunKernel(v1::DATA_TYPE_FLOAT32, {{3, -4, 1}, {3, -4, 1}}),
            (std::vector<double>{3, -4, 1}));
  EXPECT_EQ(RunKernel(v1::DATA_TYPE_FLOAT64, {{2, 0, 0}, {0, 5, 0}}),
            (std::vector<double>{2, 5, 0}));
}

TEST(AdasumKernelTest, ZeroNormsKeepCoefficientOneAsHorovodDoes) {
  // ‖b‖² = 0 (and a tiny one below 1e-8) leaves a unchanged: no division by zero.
  EXPECT_EQ(RunKernel(v1::DATA_TYPE_FLOAT64, {{1, 2}, {0, 0}}), (std::vector<double>{1, 2}));
  const std::vector<double> tiny = RunKernel(v1::DATA_TYPE_FLOAT64, {{1, 2}, {1e-5, 0}});
  EXPECT_DOUBLE_EQ(tiny[0], (1 - 1e-5 / 10) * 1 + 1e-5);
  EXPECT_EQ(RunKernel(v1::DATA_TYPE_FLOAT32, {{0, 0}, {0, 0}}), (std::vector<double>{0, 0}));
}

TEST(AdasumKernelTest, NullInputsStandForZeros) {
  const std::vector<std::byte> a = Encode(v1::DATA_TYPE_FLOAT32, {1, 2, 3});
  const std::vector<std::byte> b = Encode(v1::DATA_TYPE_FLOAT32, {3, 2, 1});
  const void* inputs[] = {a.data(), nullptr, b.data(), nullptr};
  std::vector<std::byte> out(3 * sizeof(float));
  Adasum(v1::DATA_TYPE_FLOAT32, inputs, out.data(), 3, 1.0, 1.0);
  ExpectNear(v1::DATA_TYPE_FLOAT32, Decode(v1::DATA_TYPE_FLOAT32, out),
             ReferenceAdasum(v1::DATA_TYPE_FLOAT32, {{1, 2, 3}, {0, 0, 0}, {3, 2, 1}, {0, 0, 0}}));
}

TEST(AdasumKernelTest, PrescaleScalesInputsAndPostscaleTheResult) {
  for (v1::DataType dtype : kTypes) {
    SCOPED_TRACE(DataTypeName(dtype));
    const auto inputs = MakeInputs(dtype, 4, 33, 7);
    std::vector<std::vector<double>> scaled = inputs;
    for (auto& input : scaled) {
      for (double& x : input) x = RoundTo(dtype, 0.5 * x);
    }
    std::vector<double> expected = ReferenceAdasum(dtype, scaled);
    for (double& x : expected) x = RoundTo(dtype, 3.0 * x);
    ExpectNear(dtype, RunKernel(dtype, inputs, 0.5, 3.0), expected);
  }
}

TEST(AdasumKernelTest, OnlyPowerOfTwoRankCountsAndFloatingPointTypesAreAccepted) {
  for (int64_t ranks : {1, 2, 4, 8, 64}) EXPECT_TRUE(IsAdasumSize(ranks)) << ranks;
  for (int64_t ranks : {0, 3, 5, 6, 7, 12}) EXPECT_FALSE(IsAdasumSize(ranks)) << ranks;
  for (v1::DataType dtype : kTypes) EXPECT_TRUE(IsAdasumType(dtype));
  for (v1::DataType dtype : {v1::DATA_TYPE_INT32, v1::DATA_TYPE_INT64, v1::DATA_TYPE_UINT8,
                             v1::DATA_TYPE_BOOL, v1::DATA_TYPE_UNSPECIFIED}) {
    EXPECT_FALSE(IsAdasumType(dtype)) << DataTypeName(dtype);
  }
}

}  // namespace
}  // namespace collective::daemon::exec
