// Two implementations of one arithmetic: a scalar one (CPUs without AVX2,
// vector tails, integers with scaling, non-x86 builds) and an AVX2 + F16C one
// compiled for those extensions only and chosen at run time, so that the
// binary runs on any x86-64. Both evaluate the same IEEE operations in the same
// order on every element (the build passes -ffp-contract=off so that no
// multiply-add is fused), hence the result never depends on which of them, or
// which split of the range, produced it.
#include "daemon/exec/reduce_kernels.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/half.h"
#include "daemon/exec/raw_memory.h"

// The AVX2 path is written for gcc (its target pragmas, its names of CPU
// features); other compilers (clang, in the fuzzing build) take the
// portable path, which computes the same results.
#if defined(__x86_64__) && !defined(__clang__)
#define COLLECTIVE_KERNELS_AVX2 1
#include <immintrin.h>
#endif

namespace collective::daemon::exec {
namespace {

enum class Op { kSum, kProduct, kMin, kMax };

// One call's operands, with the scale factors in the accumulator's precision.
template <typename Acc>
struct Job {
  const void* const* inputs;
  size_t num_inputs;
  void* out;
  Acc prescale;
  Acc factor;  // postscale / divisor, applied to the result
  bool has_prescale;
  bool has_factor;
};

// ---------------------------------------------------------------------------
// Scalar formats: how one element is loaded into and stored from its
// accumulator (exec/raw_memory.h keeps unaligned buffers legal).

template <typename T>
struct Plain {  // integers, float32, float64: reduced in their own type
  using Storage = T;
  using Acc = T;
  static Acc Load(const void* p, size_t i) { return LoadRaw<T>(p, i); }
  static void Store(void* p, size_t i, Acc v) { StoreRaw<T>(p, i, v); }
};

struct Half {
  using Storage = uint16_t;
  using Acc = float;
  static Acc Load(const void* p, size_t i) { return HalfToFloat(LoadRaw<uint16_t>(p, i)); }
  static void Store(void* p, size_t i, Acc v) { StoreRaw<uint16_t>(p, i, FloatToHalf(v)); }
};

struct BFloat {
  using Storage = uint16_t;
  using Acc = float;
  static Acc Load(const void* p, size_t i) { return BFloat16ToFloat(LoadRaw<uint16_t>(p, i)); }
  static void Store(void* p, size_t i, Acc v) { StoreRaw<uint16_t>(p, i, FloatToBFloat16(v)); }
};

// Normalised to 0/1 on load, so that MIN and MAX are logical and / or.
struct Bool {
  using Storage = uint8_t;
  using Acc = uint8_t;
  static Acc Load(const void* p, size_t i) { return LoadRaw<uint8_t>(p, i) != 0 ? 1 : 0; }
  static void Store(void* p, size_t i, Acc v) { StoreRaw<uint8_t>(p, i, v); }
};

// ---------------------------------------------------------------------------
// Scalar operations.

// Two's-complement wrap-around without signed overflow: the arithmetic runs in
// an unsigned type at least as wide as int, so that uint16 * uint16 does not
// promote to a signed int that can overflow.
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// A NaN operand of a float add or multiply gives the left operand's NaN if it
// is one, else the right one's, made quiet. x86 does this by operand position,
// but compilers swap the operands of commutative operations freely, so the
// choice is spelled out here and pinned with asm in the vector code.
template <typename F>
F Quiet(F x) {
  using Bits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  constexpr Bits kQuietBit = Bits{1} << (std::numeric_limits<F>::digits - 2);
  return std::bit_cast<F>(static_cast<Bits>(std::bit_cast<Bits>(x) | kQuietBit));
}

template <typename F>
F FloatAdd(F a, F b) {
  return std::isnan(a) ? Quiet(a) : a + b;
}

template <typename F>
F FloatMul(F a, F b) {
  return std::isnan(a) ? Quiet(a) : a * b;
}

// MIN/MAX on floats: NaN wins (the first NaN operand, bits unchanged), and
// -0 is smaller than +0, so the result does not depend on SIMD min/max quirks.
template <typename F>
F FloatMin(F a, F b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

template <typename F>
F FloatMax(F a, F b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

template <Op op, typename A>
A Apply(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if constexpr (op == Op::kSum) return FloatAdd(a, b);
    if constexpr (op == Op::kProduct) return FloatMul(a, b);
    if constexpr (op == Op::kMin) return FloatMin(a, b);
    if constexpr (op == Op::kMax) return FloatMax(a, b);
  } else {
    using W = WrapType<A>;
    if constexpr (op == Op::kSum) return static_cast<A>(static_cast<W>(a) + static_cast<W>(b));
    if constexpr (op == Op::kProduct) return static_cast<A>(static_cast<W>(a) * static_cast<W>(b));
    if constexpr (op == Op::kMin) return a < b ? a : b;
    if constexpr (op == Op::kMax) return a < b ? b : a;
  }
}

// Integer jobs never scale here (see ScaledIntegerRange).
template <class Format, Op op>
void ScalarRange(const Job<typename Format::Acc>& job, size_t begin, size_t end) {
  using Acc = typename Format::Acc;
  const Job<Acc> local = job;  // stores through void* could alias job
  const auto scale = [](bool enabled, Acc x, Acc factor) {
    if constexpr (std::is_floating_point_v<Acc>) return enabled ? FloatMul(x, factor) : x;
    return x;
  };
  for (size_t i = begin; i < end; ++i) {
    Acc acc = scale(local.has_prescale, Format::Load(local.inputs[0], i), local.prescale);
    for (size_t j = 1; j < local.num_inputs; ++j) {
      acc = Apply<op>(acc,
                      scale(local.has_prescale, Format::Load(local.inputs[j], i), local.prescale));
    }
    acc = scale(local.has_factor, acc, local.factor);
    Format::Store(local.out, i, acc);
  }
}

// Truncates toward zero and saturates; NaN becomes 0.
template <typename T>
T SaturatingCast(double value) {
  if (std::isnan(value)) return 0;
  // Both bounds are 0 or powers of two, hence exact in double.
  constexpr double kMin = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double kMaxPlusOne = static_cast<double>(std::numeric_limits<T>::max() / 2 + 1) * 2.0;
  if (value <= kMin) return std::numeric_limits<T>::min();
  if (value >= kMaxPlusOne) return std::numeric_limits<T>::max();
  return static_cast<T>(std::trunc(value));
}

// Integers with a scale factor: rare and not worth vectorising.
template <typename T, Op op>
void ScaledIntegerRange(const ReduceSpec& spec, const void* const* inputs, size_t num_inputs,
                        void* out, size_t count) {
  const bool has_prescale = spec.prescale != 1.0;
  const bool has_final = spec.postscale != 1.0 || spec.divisor != 1;
  const double divisor = static_cast<double>(spec.divisor);
  auto load = [&](size_t j, size_t i) {
    const T x = LoadRaw<T>(inputs[j], i);
    return has_prescale ? SaturatingCast<T>(static_cast<double>(x) * spec.prescale) : x;
  };
  for (size_t i = 0; i < count; ++i) {
    T acc = load(0, i);
    for (size_t j = 1; j < num_inputs; ++j) acc = Apply<op>(acc, load(j, i));
    if (has_final) acc = SaturatingCast<T>(static_cast<double>(acc) * spec.postscale / divisor);
    StoreRaw<T>(out, i, acc);
  }
}

}  // namespace
}  // namespace collective::daemon::exec

// ---------------------------------------------------------------------------
// AVX2 + F16C. Everything between push_options and pop_options is compiled for
// those extensions and only runs after the CPU check in Reduce.
#if defined(COLLECTIVE_KERNELS_AVX2)
#pragma GCC push_options
#pragma GCC target("avx2,f16c")

namespace collective::daemon::exec {
namespace {
namespace avx2 {

// Add and multiply with `a` as the first source operand, which x86 returns
// when both are NaN (see FloatAdd). asm, because the compiler may swap the
// operands of the intrinsics; {AT&T|Intel} operand orders.
inline __m256 AddPs(__m256 a, __m256 b) {
  __m256 r;
  asm("vaddps {%2, %1, %0|%0, %1, %2}" : "=x"(r) : "x"(a), "xm"(b));
  return r;
}

inline __m256 MulPs(__m256 a, __m256 b) {
  __m256 r;
  asm("vmulps {%2, %1, %0|%0, %1, %2}" : "=x"(r) : "x"(a), "xm"(b));
  return r;
}

inline __m256d AddPd(__m256d a, __m256d b) {
  __m256d r;
  asm("vaddpd {%2, %1, %0|%0, %1, %2}" : "=x"(r) : "x"(a), "xm"(b));
  return r;
}

inline __m256d MulPd(__m256d a, __m256d b) {
  __m256d r;
  asm("vmulpd {%2, %1, %0|%0, %1, %2}" : "=x"(r) : "x"(a), "xm"(b));
  return r;
}

// Float32 lane arithmetic, shared by float32, float16 and bfloat16.
struct PsMath {
  using V = __m256;
  static V Splat(float x) { return _mm256_set1_ps(x); }
  static V Mul(V a, V b) { return MulPs(a, b); }
  template <Op op>
  static V Apply(V a, V b) {
    if constexpr (op == Op::kSum) return AddPs(a, b);
    if constexpr (op == Op::kProduct) return MulPs(a, b);
    // min_ps/max_ps return b when either is NaN and on -0 vs +0; patch both
    // cases to match FloatMin/FloatMax: equal operands combine their sign
    // bits, and a NaN in a is kept.
    if constexpr (op == Op::kMin) {
      const V equal = _mm256_cmp_ps(a, b, _CMP_EQ_OQ);
      const V r = _mm256_blendv_ps(_mm256_min_ps(a, b), _mm256_or_ps(a, b), equal);
      return _mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    }
    if constexpr (op == Op::kMax) {
      const V equal = _mm256_cmp_ps(a, b, _CMP_EQ_OQ);
      const V r = _mm256_blendv_ps(_mm256_max_ps(a, b), _mm256_and_ps(a, b), equal);
      return _mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    }
  }
};

struct PdMath {
  using V = __m256d;
  static V Splat(double x) { return _mm256_set1_pd(x); }
  static V Mul(V a, V b) { return MulPd(a, b); }
  template <Op op>
  static V Apply(V a, V b) {
    if constexpr (op == Op::kSum) return AddPd(a, b);
    if constexpr (op == Op::kProduct) return MulPd(a, b);
    if constexpr (op == Op::kMin) {
      const V equal = _mm256_cmp_pd(a, b, _CMP_EQ_OQ);
      const V r = _mm256_blendv_pd(_mm256_min_pd(a, b), _mm256_or_pd(a, b), equal);
      return _mm256_blendv_pd(r, a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
    }
    if constexpr (op == Op::kMax) {
      const V equal = _mm256_cmp_pd(a, b, _CMP_EQ_OQ);
      const V r = _mm256_blendv_pd(_mm256_max_pd(a, b), _mm256_and_pd(a, b), equal);
      return _mm256_blendv_pd(r, a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
    }
  }
};

// Integer lanes of T, wrapping like the scalar Apply.
template <typename T>
struct IntMath {
  using V = __m256i;
  static constexpr bool kSigned = std::is_signed_v<T>;

  template <Op op>
  static V Apply(V a, V b) {
    if constexpr (op == Op::kSum) return Add(a, b);
    if constexpr (op == Op::kProduct) return Multiply(a, b);
    if constexpr (op == Op::kMin || op == Op::kMax) return MinMax<op == Op::kMin>(a, b);
  }

  static V Add(V a, V b) {
    if constexpr (sizeof(T) == 1) return _mm256_add_epi8(a, b);
    if constexpr (sizeof(T) == 2) return _mm256_add_epi16(a, b);
    if constexpr (sizeof(T) == 4) return _mm256_add_epi32(a, b);
    if constexpr (sizeof(T) == 8) return _mm256_add_epi64(a, b);
  }

  // The low half of a product does not depend on signedness; AVX2 lacks 8-
  // and 64-bit multiplies, so those are assembled from 16- and 32-bit ones.
  static V Multiply(V a, V b) {
    if constexpr (sizeof(T) == 1) {
      const V even = _mm256_mullo_epi16(a, b);
      const V odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
      return _mm256_or_si256(_mm256_slli_epi16(odd, 8),
                             _mm256_and_si256(even, _mm256_set1_epi16(0xff)));
    }
    if constexpr (sizeof(T) == 2) return _mm256_mullo_epi16(a, b);
    if constexpr (sizeof(T) == 4) return _mm256_mullo_epi32(a, b);
    if constexpr (sizeof(T) == 8) {
      const V low = _mm256_mul_epu32(a, b);
      const V cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                       _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
      return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
    }
  }

  template <bool kMin>
  static V MinMax(V a, V b) {
    if constexpr (sizeof(T) == 1 && kSigned)
      return kMin ? _mm256_min_epi8(a, b) : _mm256_max_epi8(a, b);
    if constexpr (sizeof(T) == 1 && !kSigned)
      return kMin ? _mm256_min_epu8(a, b) : _mm256_max_epu8(a, b);
    if constexpr (sizeof(T) == 2 && kSigned)
      return kMin ? _mm256_min_epi16(a, b) : _mm256_max_epi16(a, b);
    if constexpr (sizeof(T) == 2 && !kSigned)
      return kMin ? _mm256_min_epu16(a, b) : _mm256_max_epu16(a, b);
    if constexpr (sizeof(T) == 4) {
      static_assert(kSigned);
      return kMin ? _mm256_min_epi32(a, b) : _mm256_max_epi32(a, b);
    }
    if constexpr (sizeof(T) == 8) {
      static_assert(kSigned);
      const V a_greater = _mm256_cmpgt_epi64(a, b);
      return kMin ? _mm256_blendv_epi8(a, b, a_greater) : _mm256_blendv_epi8(b, a, a_greater);
    }
  }
};

// Vector formats: one register of lanes, loaded from and stored to a buffer at
// element index i. Stream stores bypass the cache; they need 32-byte aligned
// output addresses (16 for the 128-bit stores of 16-bit types).
template <typename T>
struct PlainVec;

template <>
struct PlainVec<float> : PsMath {
  static constexpr size_t kLanes = 8;
  static V Load(const void* p, size_t i) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
  static void Store(void* p, size_t i, V v) { _mm256_storeu_ps(static_cast<float*>(p) + i, v); }
  static void Stream(void* p, size_t i, V v) { _mm256_stream_ps(static_cast<float*>(p) + i, v); }
};

template <>
struct PlainVec<double> : PdMath {
  static constexpr size_t kLanes = 4;
  static V Load(const void* p, size_t i) {
    return _mm256_loadu_pd(static_cast<const double*>(p) + i);
  }
  static void Store(void* p, size_t i, V v) { _mm256_storeu_pd(static_cast<double*>(p) + i, v); }
  static void Stream(void* p, size_t i, V v) { _mm256_stream_pd(static_cast<double*>(p) + i, v); }
};

template <typename T>
struct IntVec : IntMath<T> {
  using V = __m256i;
  static constexpr size_t kLanes = 32 / sizeof(T);
  static V* At(void* p, size_t i) { return reinterpret_cast<V*>(static_cast<T*>(p) + i); }
  static V Load(const void* p, size_t i) {
    return _mm256_loadu_si256(reinterpret_cast<const V*>(static_cast<const T*>(p) + i));
  }
  static void Store(void* p, size_t i, V v) { _mm256_storeu_si256(At(p, i), v); }
  static void Stream(void* p, size_t i, V v) { _mm256_stream_si256(At(p, i), v); }
};

// Sixteen float32 lanes in two registers, for the 16-bit floats: one 256-bit
// store per step, which matters for streaming stores.
struct PsPair {
  __m256 lo;
  __m256 hi;
};

struct PsPairMath {
  using V = PsPair;
  static V Splat(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  static V Mul(V a, V b) { return {PsMath::Mul(a.lo, b.lo), PsMath::Mul(a.hi, b.hi)}; }
  template <Op op>
  static V Apply(V a, V b) {
    return {PsMath::Apply<op>(a.lo, b.lo), PsMath::Apply<op>(a.hi, b.hi)};
  }
};

// Sixteen 16-bit values, narrowed by the derived class's Narrow.
template <class Derived>
struct Store16 : PsPairMath {
  static constexpr size_t kLanes = 16;
  static __m256i* At(void* p, size_t i) {
    return reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i);
  }
  static const __m128i* At128(const void* p, size_t i) {
    return reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i);
  }
  static void Store(void* p, size_t i, V v) { _mm256_storeu_si256(At(p, i), Derived::Narrow(v)); }
  static void Stream(void* p, size_t i, V v) { _mm256_stream_si256(At(p, i), Derived::Narrow(v)); }
};

struct HalfVec : Store16<HalfVec> {
  static V Load(const void* p, size_t i) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(At128(p, i))),
            _mm256_cvtph_ps(_mm_loadu_si128(At128(p, i + 8)))};
  }
  static __m256i Narrow(V v) {
    return _mm256_set_m128i(_mm256_cvtps_ph(v.hi, _MM_FROUND_TO_NEAREST_INT),
                            _mm256_cvtps_ph(v.lo, _MM_FROUND_TO_NEAREST_INT));
  }
};

// Widening is a shift into the top half of a float32, done by interleaving
// with zeros; the interleave puts elements 0-3 and 8-11 in lo and 4-7 and
// 12-15 in hi, an order that the pack in Narrow undoes for free.
struct BFloatVec : Store16<BFloatVec> {
  static V Load(const void* p, size_t i) {
    const __m256i x =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
    const __m256i zero = _mm256_setzero_si256();
    return {_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, x)),
            _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, x))};
  }
  // FloatToBFloat16 on eight lanes, into the low half of each 32-bit lane:
  // add 0x7fff plus the lowest kept bit and truncate; NaNs are truncated and
  // made quiet instead.
  static __m256i Round(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i top = _mm256_srli_epi32(bits, 16);
    const __m256i odd = _mm256_and_si256(top, _mm256_set1_epi32(1));
    const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), odd);
    const __m256i quiet_nan = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
    const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(_mm256_srli_epi32(sum, 16), quiet_nan, is_nan);
  }
  // Every lane is below 0x10000, so the unsigned saturation never bites.
  static __m256i Narrow(V v) { return _mm256_packus_epi32(Round(v.lo), Round(v.hi)); }
};

// The vector format that matches a scalar one.
template <class Format>
struct VecOf;
template <>
struct VecOf<Plain<float>> {
  using type = PlainVec<float>;
};
template <>
struct VecOf<Plain<double>> {
  using type = PlainVec<double>;
};
template <>
struct VecOf<Half> {
  using type = HalfVec;
};
template <>
struct VecOf<BFloat> {
  using type = BFloatVec;
};
template <typename T>
struct VecOf<Plain<T>> {
  using type = IntVec<T>;
};

// Bool lanes: normalised to 0/1 on load, then reduced as uint8 min (and) or
// max (or).
struct BoolVec : IntVec<uint8_t> {
  static V Load(const void* p, size_t i) {
    const V zero = _mm256_cmpeq_epi8(IntVec<uint8_t>::Load(p, i), _mm256_setzero_si256());
    return _mm256_andnot_si256(zero, _mm256_set1_epi8(1));
  }
};
template <>
struct VecOf<Bool> {
  using type = BoolVec;
};

// Four registers per step hide the latency of the op chain when the data is
// in cache; beyond that the loop is bound by memory bandwidth.
constexpr size_t kUnroll = 4;

// Reduces elements [begin, end) with whole registers; (end - begin) must be a
// multiple of kUnroll * kLanes.
template <class Vec, Op op, bool kPre, bool kPost, bool kStream, typename Acc>
void VectorRange(const Job<Acc>& job, size_t begin, size_t end) {
  using V = typename Vec::V;
  constexpr size_t kLanes = Vec::kLanes;
  // Locals, because stores through void* could alias job.
  const void* const* inputs = job.inputs;
  const size_t num_inputs = job.num_inputs;
  void* out = job.out;
  V prescale{};
  V factor{};
  if constexpr (kPre) prescale = Vec::Splat(job.prescale);
  if constexpr (kPost) factor = Vec::Splat(job.factor);
  for (size_t i = begin; i < end; i += kUnroll * kLanes) {
    V acc[kUnroll];
    for (size_t u = 0; u < kUnroll; ++u) {
      acc[u] = Vec::Load(inputs[0], i + u * kLanes);
      if constexpr (kPre) acc[u] = Vec::Mul(acc[u], prescale);
    }
    for (size_t j = 1; j < num_inputs; ++j) {
      const void* input = inputs[j];
      for (size_t u = 0; u < kUnroll; ++u) {
        V x = Vec::Load(input, i + u * kLanes);
        if constexpr (kPre) x = Vec::Mul(x, prescale);
        acc[u] = Vec::template Apply<op>(acc[u], x);
      }
    }
    for (size_t u = 0; u < kUnroll; ++u) {
      if constexpr (kPost) acc[u] = Vec::Mul(acc[u], factor);
      if constexpr (kStream) {
        Vec::Stream(out, i + u * kLanes, acc[u]);
      } else {
        Vec::Store(out, i + u * kLanes, acc[u]);
      }
    }
  }
}

// Output ranges at least this large are written with streaming stores: they
// do not fit in the caches anyway, and skipping the read-for-ownership of the
// output lines saves one of the k + 2 passes over memory.
constexpr size_t kStreamBytes = size_t{4} << 20;

template <class Format, Op op, bool kPre, bool kPost>
void Run(const Job<typename Format::Acc>& job, size_t count) {
  using Vec = typename VecOf<Format>::type;
  using Storage = typename Format::Storage;
  constexpr size_t kStep = kUnroll * Vec::kLanes;
  const auto address = reinterpret_cast<uintptr_t>(job.out);
  const bool stream = count * sizeof(Storage) >= kStreamBytes && address % sizeof(Storage) == 0;
  // Streaming stores need aligned output: reduce up to the boundary in scalar.
  const size_t head = stream ? (-address % 32) / sizeof(Storage) : 0;
  const size_t body_end = head + (count - head) / kStep * kStep;
  ScalarRange<Format, op>(job, 0, head);
  if (stream) {
    VectorRange<Vec, op, kPre, kPost, true>(job, head, body_end);
    _mm_sfence();  // order the streamed lines before whoever reads the result
  } else {
    VectorRange<Vec, op, kPre, kPost, false>(job, head, body_end);
  }
  ScalarRange<Format, op>(job, body_end, count);
}

template <class Format, Op op>
void Reduce(const Job<typename Format::Acc>& job, size_t count) {
  if constexpr (std::is_floating_point_v<typename Format::Acc>) {
    if (job.has_prescale && job.has_factor) return Run<Format, op, true, true>(job, count);
    if (job.has_prescale) return Run<Format, op, true, false>(job, count);
    if (job.has_factor) return Run<Format, op, false, true>(job, count);
  }
  Run<Format, op, false, false>(job, count);
}

}  // namespace avx2
}  // namespace
}  // namespace collective::daemon::exec

#pragma GCC pop_options
#endif  // defined(COLLECTIVE_KERNELS_AVX2)

namespace collective::daemon::exec {
namespace {

#if defined(COLLECTIVE_KERNELS_AVX2)
bool UseAvx2() {
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return supported;
}
#endif

template <class Format, Op op>
void ReduceFormat(const ReduceSpec& spec, std::span<const void* const> inputs, void* out,
                  size_t count) {
  using Acc = typename Format::Acc;
  constexpr bool kIsInteger = !std::is_floating_point_v<Acc> && !std::is_same_v<Format, Bool>;
  if constexpr (kIsInteger) {
    if (spec.prescale != 1.0 || spec.postscale != 1.0 || spec.divisor != 1) {
      return ScaledIntegerRange<Acc, op>(spec, inputs.data(), inputs.size(), out, count);
    }
  }
  Job<Acc> job{inputs.data(), inputs.size(), out, Acc{1}, Acc{1}, false, false};
  if constexpr (std::is_floating_point_v<Acc>) {
    const double factor = spec.postscale / static_cast<double>(spec.divisor);
    job.prescale = static_cast<Acc>(spec.prescale);
    job.factor = static_cast<Acc>(factor);
    job.has_prescale = spec.prescale != 1.0;
    job.has_factor = factor != 1.0;
  }
#if defined(COLLECTIVE_KERNELS_AVX2)
  if (UseAvx2()) return avx2::Reduce<Format, op>(job, count);
#endif
  ScalarRange<Format, op>(job, 0, count);
}

template <class Format>
void ReduceWith(const ReduceSpec& spec, std::span<const void* const> inputs, void* out,
                size_t count) {
  switch (spec.op) {
    case v1::REDUCE_OP_SUM:
      if constexpr (!std::is_same_v<Format, Bool>) {
        return ReduceFormat<Format, Op::kSum>(spec, inputs, out, count);
      }
      break;
    case v1::REDUCE_OP_PRODUCT:
      if constexpr (!std::is_same_v<Format, Bool>) {
        return ReduceFormat<Format, Op::kProduct>(spec, inputs, out, count);
      }
      break;
    case v1::REDUCE_OP_MIN:
      return ReduceFormat<Format, Op::kMin>(spec, inputs, out, count);
    case v1::REDUCE_OP_MAX:
      return ReduceFormat<Format, Op::kMax>(spec, inputs, out, count);
    default:
      break;
  }
}

}  // namespace

bool IsReducible(v1::DataType dtype, v1::ReduceOp op) {
  const bool numeric_op = op == v1::REDUCE_OP_SUM || op == v1::REDUCE_OP_PRODUCT ||
                          op == v1::REDUCE_OP_MIN || op == v1::REDUCE_OP_MAX;
  switch (dtype) {
    case v1::DATA_TYPE_UINT8:
    case v1::DATA_TYPE_INT8:
    case v1::DATA_TYPE_UINT16:
    case v1::DATA_TYPE_INT16:
    case v1::DATA_TYPE_INT32:
    case v1::DATA_TYPE_INT64:
    case v1::DATA_TYPE_FLOAT16:
    case v1::DATA_TYPE_BFLOAT16:
    case v1::DATA_TYPE_FLOAT32:
    case v1::DATA_TYPE_FLOAT64:
      return numeric_op;
    case v1::DATA_TYPE_BOOL:
      return op == v1::REDUCE_OP_MIN || op == v1::REDUCE_OP_MAX;
    default:
      return false;
  }
}

void Reduce(const ReduceSpec& spec, std::span<const void* const> inputs, void* out, size_t count) {
  if (count == 0 || inputs.empty()) return;
  switch (spec.dtype) {
    case v1::DATA_TYPE_UINT8:
      return ReduceWith<Plain<uint8_t>>(spec, inputs, out, count);
    case v1::DATA_TYPE_INT8:
      return ReduceWith<Plain<int8_t>>(spec, inputs, out, count);
    case v1::DATA_TYPE_UINT16:
      return ReduceWith<Plain<uint16_t>>(spec, inputs, out, count);
    case v1::DATA_TYPE_INT16:
      return ReduceWith<Plain<int16_t>>(spec, inputs, out, count);
    case v1::DATA_TYPE_INT32:
      return ReduceWith<Plain<int32_t>>(spec, inputs, out, count);
    case v1::DATA_TYPE_INT64:
      return ReduceWith<Plain<int64_t>>(spec, inputs, out, count);
    case v1::DATA_TYPE_FLOAT16:
      return ReduceWith<Half>(spec, inputs, out, count);
    case v1::DATA_TYPE_BFLOAT16:
      return ReduceWith<BFloat>(spec, inputs, out, count);
    case v1::DATA_TYPE_FLOAT32:
      return ReduceWith<Plain<float>>(spec, inputs, out, count);
    case v1::DATA_TYPE_FLOAT64:
      return ReduceWith<Plain<double>>(spec, inputs, out, count);
    case v1::DATA_TYPE_BOOL:
      return ReduceWith<Bool>(spec, inputs, out, count);
    default:
      return;
  }
}

}  // namespace collective::daemon::exec
