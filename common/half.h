// Scalar IEEE binary16 and bfloat16 conversions, bit-exact with round to
// nearest even; NaNs come out quiet with the top of their payload kept, as x86
// F16C and GCC's _Float16 conversions do. Stored as uint16_t so that the types
// stay plain data in shared memory and on the wire. The vectorised reduction
// kernels have their own wide versions and are tested against these.
#pragma once

#include <bit>
#include <cstdint>

namespace collective {

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1fu) {  // inf, or NaN made quiet with its payload kept (as F16C does)
    bits = sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent != 0) {  // normal
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // signed zero
    bits = sign;
  } else {  // subnormal: shift the leading one into the implicit bit
    exponent = 127 - 15 + 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t FloatToHalf(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  bits &= 0x7fffffffu;
  uint32_t half;
  if (bits > 0x7f800000u) {  // NaN: keep the payload's top bits and make it quiet (as F16C does)
    half = 0x7e00u | ((bits >> 13) & 0x3ffu);
  } else if (bits >= 0x47800000u) {  // |value| >= 65536, or inf
    half = 0x7c00u;
  } else if (bits < 0x38800000u) {  // below 2^-14: subnormal or zero
    // Adding 0.5 aligns the 10 kept mantissa bits at the bottom of the float;
    // the FPU's own round-to-nearest-even does the rounding.
    const float aligned = std::bit_cast<float>(bits) + 0.5f;
    half = std::bit_cast<uint32_t>(aligned) - 0x3f000000u;
  } else {
    const uint32_t odd = (bits >> 13) & 1u;
    bits += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
    half = bits >> 13;  // a carry into the exponent rounds up to inf correctly
  }
  return static_cast<uint16_t>(half | sign);
}

inline float BFloat16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate, keep it quiet
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace collective
