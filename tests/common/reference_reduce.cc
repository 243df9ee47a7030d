#include "tests/common/reference_reduce.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include <fmt/format.h>

#include "common/dtype.h"
#include "common/half.h"

namespace collective::testing {
namespace {

template <typename T>
T Get(const void* base, size_t i) {
  T value;
  std::memcpy(&value, static_cast<const char*>(base) + i * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void Put(void* base, size_t i, T value) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(T), &value, sizeof(T));
}

// ---------------------------------------------------------------------------
// ReferenceReduce

template <typename T>
T TruncateAndSaturate(double value) {
  if (std::isnan(value)) return 0;
  const double truncated = std::trunc(value);
  if (truncated <= static_cast<double>(std::numeric_limits<T>::min())) {
    return std::numeric_limits<T>::min();
  }
  // max + 1 is 2^digits, exact in double even for int64.
  if (truncated >= std::ldexp(1.0, std::numeric_limits<T>::digits)) {
    return std::numeric_limits<T>::max();
  }
  return static_cast<T>(truncated);
}

template <typename T>
T IntegerOp(v1::ReduceOp op, T a, T b) {
  // uint64 arithmetic wraps; converting back keeps the low bits (C++20).
  const auto wide_a = static_cast<uint64_t>(a);
  const auto wide_b = static_cast<uint64_t>(b);
  switch (op) {
    case v1::REDUCE_OP_SUM:
      return static_cast<T>(wide_a + wide_b);
    case v1::REDUCE_OP_PRODUCT:
      return static_cast<T>(wide_a * wide_b);
    case v1::REDUCE_OP_MIN:
      return std::min(a, b);
    case v1::REDUCE_OP_MAX:
      return std::max(a, b);
    default:
      return 0;
  }
}

template <typename T>
void ReferenceInteger(const daemon::exec::ReduceSpec& spec, std::span<const void* const> inputs,
                      void* out, size_t count) {
  const bool final_scale = spec.postscale != 1.0 || spec.divisor != 1;
  for (size_t i = 0; i < count; ++i) {
    T acc = 0;
    for (size_t j = 0; j < inputs.size(); ++j) {
      T x = Get<T>(inputs[j], i);
      if (spec.prescale != 1.0) x = TruncateAndSaturate<T>(static_cast<double>(x) * spec.prescale);
      acc = j == 0 ? x : IntegerOp(spec.op, acc, x);
    }
    if (final_scale) {
      acc = TruncateAndSaturate<T>(static_cast<double>(acc) * spec.postscale /
                                   static_cast<double>(spec.divisor));
    }
    Put(out, i, acc);
  }
}

float Quieted(float nan) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(nan) | 0x00400000u);
}

double Quieted(double nan) {
  return std::bit_cast<double>(std::bit_cast<uint64_t>(nan) | 0x0008000000000000ull);
}

// The contract picks the left NaN, then the right one, made quiet; plain
// `a + b` would leave the choice to the compiler's operand order.
template <typename F>
F Arithmetic(bool multiply, F a, F b) {
  if (std::isnan(a)) return Quieted(a);
  if (std::isnan(b)) return Quieted(b);
  return multiply ? a * b : a + b;
}

template <typename F>
F FloatOp(v1::ReduceOp op, F a, F b) {
  switch (op) {
    case v1::REDUCE_OP_SUM:
      return Arithmetic(false, a, b);
    case v1::REDUCE_OP_PRODUCT:
      return Arithmetic(true, a, b);
    case v1::REDUCE_OP_MIN:
    case v1::REDUCE_OP_MAX: {
      const bool min = op == v1::REDUCE_OP_MIN;
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      if (a == b) return min == std::signbit(a) ? a : b;  // -0 orders below +0
      return (a < b) == min ? a : b;
    }
    default:
      return 0;
  }
}

template <typename Storage, typename Acc, typename Widen, typename Narrow>
void ReferenceFloat(const daemon::exec::ReduceSpec& spec, std::span<const void* const> inputs,
                    void* out, size_t count, Widen widen, Narrow narrow) {
  const Acc prescale = static_cast<Acc>(spec.prescale);
  const double factor = spec.postscale / static_cast<double>(spec.divisor);
  for (size_t i = 0; i < count; ++i) {
    Acc acc = 0;
    for (size_t j = 0; j < inputs.size(); ++j) {
      Acc x = widen(Get<Storage>(inputs[j], i));
      if (spec.prescale != 1.0) x = Arithmetic(true, x, prescale);
      acc = j == 0 ? x : FloatOp(spec.op, acc, x);
    }
    if (factor != 1.0) acc = Arithmetic(true, acc, static_cast<Acc>(factor));
    Put<Storage>(out, i, narrow(acc));
  }
}

void ReferenceBool(const daemon::exec::ReduceSpec& spec, std::span<const void* const> inputs,
                   void* out, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    bool acc = Get<uint8_t>(inputs[0], i) != 0;
    for (size_t j = 1; j < inputs.size(); ++j) {
      const bool x = Get<uint8_t>(inputs[j], i) != 0;
      acc = spec.op == v1::REDUCE_OP_MIN ? (acc && x) : (acc || x);
    }
    Put<uint8_t>(out, i, acc ? 1 : 0);
  }
}

// ---------------------------------------------------------------------------
// FillTestData

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double FloatValue(v1::ReduceOp op, uint64_t bits) {
  if (op == v1::REDUCE_OP_PRODUCT) return 0.5 + static_cast<double>(bits % 1025) / 1024.0;
  return static_cast<double>(static_cast<int>(bits % 65) - 32) / 8.0;
}

template <typename T>
T IntegerValue(v1::ReduceOp op, uint64_t bits) {
  if ((bits >> 60) == 0) return static_cast<T>(bits >> 8);  // any value, for wrap-around
  constexpr bool kSigned = std::is_signed_v<T>;
  if (op == v1::REDUCE_OP_PRODUCT) {  // mostly non-zero, so that products stay interesting
    const int magnitude = 1 + static_cast<int>(bits % 3);
    return static_cast<T>(kSigned && (bits & 8) != 0 ? -magnitude : magnitude);
  }
  const int value = static_cast<int>(bits % 201);
  return static_cast<T>(kSigned ? value - 100 : value);
}

uint8_t BoolValue(uint64_t bits) {
  const int choice = static_cast<int>(bits % 16);
  if (choice < 7) return 0;
  if (choice < 14) return 1;
  return choice == 14 ? 2 : 255;
}

// ---------------------------------------------------------------------------
// CompareBitwise

std::string Describe(v1::DataType dtype, const void* base, size_t i) {
  switch (dtype) {
    case v1::DATA_TYPE_UINT8:
    case v1::DATA_TYPE_BOOL:
      return fmt::format("{}", Get<uint8_t>(base, i));
    case v1::DATA_TYPE_INT8:
      return fmt::format("{}", Get<int8_t>(base, i));
    case v1::DATA_TYPE_UINT16:
      return fmt::format("{}", Get<uint16_t>(base, i));
    case v1::DATA_TYPE_INT16:
      return fmt::format("{}", Get<int16_t>(base, i));
    case v1::DATA_TYPE_INT32:
      return fmt::format("{}", Get<int32_t>(base, i));
    case v1::DATA_TYPE_INT64:
      return fmt::format("{}", Get<int64_t>(base, i));
    case v1::DATA_TYPE_FLOAT16: {
      const auto bits = Get<uint16_t>(base, i);
      return fmt::format("{} (0x{:04x})", HalfToFloat(bits), bits);
    }
    case v1::DATA_TYPE_BFLOAT16: {
      const auto bits = Get<uint16_t>(base, i);
      return fmt::format("{} (0x{:04x})", BFloat16ToFloat(bits), bits);
    }
    case v1::DATA_TYPE_FLOAT32:
      return fmt::format("{} (0x{:08x})", Get<float>(base, i), Get<uint32_t>(base, i));
    case v1::DATA_TYPE_FLOAT64:
      return fmt::format("{} (0x{:016x})", Get<double>(base, i), Get<uint64_t>(base, i));
    default:
      return "?";
  }
}

}  // namespace

void ReferenceReduce(const daemon::exec::ReduceSpec& spec, std::span<const void* const> inputs,
                     void* out, size_t count) {
  const auto same = [](auto x) { return x; };
  switch (spec.dtype) {
    case v1::DATA_TYPE_UINT8:
      return ReferenceInteger<uint8_t>(spec, inputs, out, count);
    case v1::DATA_TYPE_INT8:
      return ReferenceInteger<int8_t>(spec, inputs, out, count);
    case v1::DATA_TYPE_UINT16:
      return ReferenceInteger<uint16_t>(spec, inputs, out, count);
    case v1::DATA_TYPE_INT16:
      return ReferenceInteger<int16_t>(spec, inputs, out, count);
    case v1::DATA_TYPE_INT32:
      return ReferenceInteger<int32_t>(spec, inputs, out, count);
    case v1::DATA_TYPE_INT64:
      return ReferenceInteger<int64_t>(spec, inputs, out, count);
    case v1::DATA_TYPE_FLOAT16:
      return ReferenceFloat<uint16_t, float>(spec, inputs, out, count, HalfToFloat, FloatToHalf);
    case v1::DATA_TYPE_BFLOAT16:
      return ReferenceFloat<uint16_t, float>(spec, inputs, out, count, BFloat16ToFloat,
                                             FloatToBFloat16);
    case v1::DATA_TYPE_FLOAT32:
      return ReferenceFloat<float, float>(spec, inputs, out, count, same, same);
    case v1::DATA_TYPE_FLOAT64:
      return ReferenceFloat<double, double>(spec, inputs, out, count, same, same);
    case v1::DATA_TYPE_BOOL:
      return ReferenceBool(spec, inputs, out, count);
    default:
      return;
  }
}

void FillTestData(v1::DataType dtype, v1::ReduceOp op, uint64_t seed, void* out, size_t count) {
  const uint64_t stream =
      SplitMix(SplitMix(seed) ^ (static_cast<uint64_t>(dtype) << 8) ^ static_cast<uint64_t>(op));
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = SplitMix(stream + i);
    const double real = FloatValue(op, bits);
    switch (dtype) {
      case v1::DATA_TYPE_UINT8:
        Put(out, i, IntegerValue<uint8_t>(op, bits));
        break;
      case v1::DATA_TYPE_INT8:
        Put(out, i, IntegerValue<int8_t>(op, bits));
        break;
      case v1::DATA_TYPE_UINT16:
        Put(out, i, IntegerValue<uint16_t>(op, bits));
        break;
      case v1::DATA_TYPE_INT16:
        Put(out, i, IntegerValue<int16_t>(op, bits));
        break;
      case v1::DATA_TYPE_INT32:
        Put(out, i, IntegerValue<int32_t>(op, bits));
        break;
      case v1::DATA_TYPE_INT64:
        Put(out, i, IntegerValue<int64_t>(op, bits));
        break;
      case v1::DATA_TYPE_FLOAT16:
        Put(out, i, FloatToHalf(static_cast<float>(real)));
        break;
      case v1::DATA_TYPE_BFLOAT16:
        Put(out, i, FloatToBFloat16(static_cast<float>(real)));
        break;
      case v1::DATA_TYPE_FLOAT32:
        Put(out, i, static_cast<float>(real));
        break;
      case v1::DATA_TYPE_FLOAT64:
        Put(out, i, real);
        break;
      case v1::DATA_TYPE_BOOL:
        Put(out, i, BoolValue(bits));
        break;
      default:
        return;
    }
  }
}

std::string CompareBitwise(v1::DataType dtype, const void* expected, const void* actual,
                           size_t count) {
  const size_t size = ElementSize(dtype);
  const auto* want = static_cast<const char*>(expected);
  const auto* got = static_cast<const char*>(actual);
  size_t first = 0;
  size_t differing = 0;
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(want + i * size, got + i * size, size) != 0 && differing++ == 0) first = i;
  }
  if (differing == 0) return "";
  return fmt::format("{} element {} of {}: expected {}, got {}; {} element(s) differ",
                     DataTypeName(dtype), first, count, Describe(dtype, expected, first),
                     Describe(dtype, actual, first), differing);
}

namespace {

// A floating-point element as a double; nullopt for other types.
std::optional<double> FloatingElement(v1::DataType dtype, const void* base, size_t i) {
  switch (dtype) {
    case v1::DATA_TYPE_FLOAT16:
      return HalfToFloat(Get<uint16_t>(base, i));
    case v1::DATA_TYPE_BFLOAT16:
      return BFloat16ToFloat(Get<uint16_t>(base, i));
    case v1::DATA_TYPE_FLOAT32:
      return Get<float>(base, i);
    case v1::DATA_TYPE_FLOAT64:
      return Get<double>(base, i);
    default:
      return std::nullopt;
  }
}

double Tolerance(v1::DataType dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_FLOAT16:
      return 4.0 / 1024;  // a few ulps of a 10-bit mantissa
    case v1::DATA_TYPE_BFLOAT16:
      return 4.0 / 128;
    case v1::DATA_TYPE_FLOAT32:
      return 1e-5;
    default:
      return 1e-12;
  }
}

}  // namespace

std::string CompareClose(v1::DataType dtype, const void* expected, const void* actual,
                         size_t count) {
  const bool floating = dtype == v1::DATA_TYPE_FLOAT16 || dtype == v1::DATA_TYPE_BFLOAT16 ||
                        dtype == v1::DATA_TYPE_FLOAT32 || dtype == v1::DATA_TYPE_FLOAT64;
  if (!floating) return CompareBitwise(dtype, expected, actual, count);
  const double tolerance = Tolerance(dtype);
  size_t first = 0;
  size_t differing = 0;
  for (size_t i = 0; i < count; ++i) {
    const double want = *FloatingElement(dtype, expected, i);
    const double got = *FloatingElement(dtype, actual, i);
    const bool close = (std::isnan(want) && std::isnan(got)) ||
                       std::abs(want - got) <= tolerance * std::max(1.0, std::abs(want));
    if (!close && differing++ == 0) first = i;
  }
  if (differing == 0) return "";
  return fmt::format(
      "{} element {} of {}: expected {}, got {} (tolerance {}); {} element(s) differ",
      DataTypeName(dtype), first, count, Describe(dtype, expected, first),
      Describe(dtype, actual, first), tolerance, differing);
}

}  // namespace collective::testing
