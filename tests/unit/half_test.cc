// common/half.h against independent conversions: GCC's _Float16 (libgcc's
// soft-float code, since this file is built for baseline x86-64) for binary16,
// and an exact nearest-even reference for bfloat16. Every 16-bit pattern is
// checked; floats are sampled across the whole range plus every rounding
// boundary of the narrow formats.
#include "common/half.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace collective {
namespace {

bool IsHalfNan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }
bool IsBFloat16Nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

// Float bit patterns worth checking for a narrow format whose values, widened,
// have the bit patterns in `narrow_bits`: each value, its float neighbours,
// and the midpoint to the next value with its neighbours (the rounding ties),
// plus a sweep of the whole 32-bit space, NaN payloads included.
std::vector<uint32_t> SampleFloats(const std::vector<uint32_t>& narrow_bits) {
  std::vector<uint32_t> samples;
  for (size_t i = 0; i + 1 < narrow_bits.size(); ++i) {
    const uint32_t value = narrow_bits[i];
    const uint32_t next = narrow_bits[i + 1];
    // The midpoint is exact in float since the narrow formats have at most 11
    // significant bits; past the largest finite value, infinity counts as the
    // next power of two, as in IEEE rounding.
    const double next_value =
        next == 0x7f800000u ? std::ldexp(1.0, 128) : std::bit_cast<float>(next);
    const uint32_t mid =
        std::bit_cast<uint32_t>(static_cast<float>((std::bit_cast<float>(value) + next_value) / 2));
    for (const uint32_t center : {value, mid}) {
      for (const uint32_t bits : {center - 1, center, center + 1}) {
        samples.push_back(bits);
        samples.push_back(bits | 0x80000000u);
      }
    }
  }
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4093) {
    samples.push_back(static_cast<uint32_t>(bits));
  }
  for (const uint32_t bits :
       {0x00000000u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x7f7fffffu, 0x7f800000u, 0x7f800001u,
        0x7fbfffffu, 0x7fc00000u, 0x7fffffffu, 0x7f802000u, 0x7f801fffu, 0x7fa00000u}) {
    samples.push_back(bits);
    samples.push_back(bits | 0x80000000u);
  }
  return samples;
}

// Widened bit patterns of all finite non-negative values of a narrow format,
// in increasing order.
template <typename Widen>
std::vector<uint32_t> FiniteMagnitudes(uint16_t max_finite, Widen widen) {
  std::vector<uint32_t> bits;
  for (uint32_t h = 0; h <= max_finite; ++h) {
    bits.push_back(std::bit_cast<uint32_t>(widen(static_cast<uint16_t>(h))));
  }
  return bits;
}

#if defined(__FLT16_MAX__)

uint16_t GccFloatToHalf(float value) {
  return std::bit_cast<uint16_t>(static_cast<_Float16>(value));
}

float GccHalfToFloat(uint16_t bits) { return static_cast<float>(std::bit_cast<_Float16>(bits)); }

TEST(HalfTest, HalfToFloatMatchesGccForEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto half = static_cast<uint16_t>(h);
    ASSERT_EQ(std::bit_cast<uint32_t>(HalfToFloat(half)),
              std::bit_cast<uint32_t>(GccHalfToFloat(half)))
        << std::hex << h;
  }
}

TEST(HalfTest, FloatToHalfMatchesGccOnSampledFloats) {
  const auto magnitudes = FiniteMagnitudes(0x7bff, HalfToFloat);
  // The overflow boundary: from the largest finite value towards 65536.
  auto boundaries = magnitudes;
  boundaries.push_back(std::bit_cast<uint32_t>(65536.0f));
  size_t checked = 0;
  for (const uint32_t bits : SampleFloats(boundaries)) {
    const float value = std::bit_cast<float>(bits);
    ASSERT_EQ(FloatToHalf(value), GccFloatToHalf(value)) << std::hex << bits;
    ++checked;
  }
  EXPECT_GT(checked, 1000000u);
}

#else

TEST(HalfTest, HalfToFloatMatchesGccForEveryPattern) { GTEST_SKIP() << "no _Float16"; }

#endif  // defined(__FLT16_MAX__)

TEST(HalfTest, EveryHalfSurvivesARoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto half = static_cast<uint16_t>(h);
    // A NaN comes back quiet: the widening sets the quiet bit.
    const uint16_t expected = IsHalfNan(half) ? (half | 0x0200u) : half;
    ASSERT_EQ(FloatToHalf(HalfToFloat(half)), expected) << std::hex << h;
  }
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x8400), -std::ldexp(1.0f, -14));
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);                      // ties to even: up to inf
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // tie to even zero
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -24)), 0x0002);         // tie to even 2
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even 1
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(std::bit_cast<float>(0xffa12345u)), 0xff09);  // quiet, payload kept
}

// ---------------------------------------------------------------------------
// bfloat16

// Nearest bfloat16, ties to even, computed on exact double distances; beyond
// the largest finite value the next candidate is 2^128, i.e. infinity.
uint16_t ReferenceFloatToBFloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  if (magnitude == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7f80u);
  const uint32_t lower = magnitude >> 16;
  const uint32_t upper = lower + 1;
  const double x = std::fabs(static_cast<double>(value));
  const double lower_value = std::bit_cast<float>(lower << 16);
  const double upper_value =
      upper == 0x7f80u ? std::ldexp(1.0, 128) : std::bit_cast<float>(upper << 16);
  const double below = x - lower_value;
  const double above = upper_value - x;
  const uint32_t nearest = below < above   ? lower
                           : above < below ? upper
                           : (lower & 1u)  ? upper
                                           : lower;
  return static_cast<uint16_t>(sign | nearest);
}

TEST(BFloat16Test, EveryPatternWidensExactlyAndSurvivesARoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bf = static_cast<uint16_t>(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(BFloat16ToFloat(bf)), b << 16) << std::hex << b;
    const uint16_t expected = IsBFloat16Nan(bf) ? (bf | 0x0040u) : bf;
    ASSERT_EQ(FloatToBFloat16(BFloat16ToFloat(bf)), expected) << std::hex << b;
  }
}

TEST(BFloat16Test, FloatToBFloat16MatchesReferenceOnSampledFloats) {
  auto boundaries = FiniteMagnitudes(0x7f7f, BFloat16ToFloat);
  boundaries.push_back(0x7f800000u);  // so that the overflow tie is sampled
  for (const uint32_t bits : SampleFloats(boundaries)) {
    const float value = std::bit_cast<float>(bits);
    ASSERT_EQ(FloatToBFloat16(value), ReferenceFloatToBFloat16(value)) << std::hex << bits;
  }
}

TEST(BFloat16Test, KnownValues) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);        // tie to even
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);        // tie to even, up
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x7f7f8000u)), 0x7f80);  // overflow tie
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x00008000u)), 0x0000);  // subnormal tie
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0xff812345u)), 0xffc1);  // quiet NaN
}

}  // namespace
}  // namespace collective
