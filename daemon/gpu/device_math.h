// The element arithmetic of the device-side reduction kernel
// (device_reduce.cu), written once for the GPU and the host: nvcc compiles it
// into the kernel, and the unit tests compile it for the CPU and hold it to
// exec::Reduce's contract (exec/reduce_kernels.h): inputs folded left to
// right, float16 and bfloat16 widened to float32, NaN operands kept left
// first, -0 below +0 in MIN/MAX, integers wrapping, scaled integers
// saturating. Plain data and no library calls the device lacks.
#pragma once

#include <bit>
#include <cstdint>

#include "common/half.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define COLLECTIVE_HD __host__ __device__ __forceinline__
#else
#define COLLECTIVE_HD inline
#endif

namespace collective::daemon::gpu::math {

// v1::DataType and v1::ReduceOp values (the wire's, which never change),
// spelled out here because the kernel's translation unit cannot include the
// protobuf headers.
enum DType : int {
  kUInt8 = 1,
  kInt8 = 2,
  kUInt16 = 3,
  kInt16 = 4,
  kInt32 = 5,
  kInt64 = 6,
  kFloat16 = 7,
  kBFloat16 = 8,
  kFloat32 = 9,
  kFloat64 = 10,
  kBool = 11,
};
enum Op : int { kSum = 1, kMin = 3, kMax = 4, kProduct = 5 };

inline constexpr int kMaxReduceInputs = 64;

// One launch of the reduction: out[i] = fold(op, inputs[j][i]) for i below
// count. A null input stands for zeros; no inputs give the op's identity.
struct ReduceParams {
  const void* inputs[kMaxReduceInputs];
  int input_count;
  void* out;
  uint64_t count;
  int dtype;
  int op;
  double prescale;
  double postscale;
  int64_t divisor;
};

// ---------------------------------------------------------------------------
// Bits, NaNs and rounded arithmetic, the same on both sides.

COLLECTIVE_HD uint32_t FloatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}
COLLECTIVE_HD float BitsFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return std::bit_cast<float>(bits);
#endif
}
COLLECTIVE_HD uint64_t DoubleBits(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  return std::bit_cast<uint64_t>(x);
#endif
}
COLLECTIVE_HD double BitsDouble(uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  return std::bit_cast<double>(bits);
#endif
}

COLLECTIVE_HD bool IsNan(float x) { return (FloatBits(x) & 0x7fffffffu) > 0x7f800000u; }
COLLECTIVE_HD bool IsNan(double x) {
  return (DoubleBits(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}
COLLECTIVE_HD bool SignBit(float x) { return (FloatBits(x) >> 31) != 0; }
COLLECTIVE_HD bool SignBit(double x) { return (DoubleBits(x) >> 63) != 0; }
COLLECTIVE_HD float Quiet(float x) { return BitsFloat(FloatBits(x) | 0x00400000u); }
COLLECTIVE_HD double Quiet(double x) { return BitsDouble(DoubleBits(x) | 0x0008000000000000ull); }

// Never contracted into a multiply-add (nvcc would, by default).
COLLECTIVE_HD float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
COLLECTIVE_HD double Add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
COLLECTIVE_HD float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
COLLECTIVE_HD double Mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// The left NaN wins, then the right one (the GPU itself would return a
// canonical NaN), made quiet.
template <typename F>
COLLECTIVE_HD F FloatAdd(F a, F b) {
  if (IsNan(a)) return Quiet(a);
  if (IsNan(b)) return Quiet(b);
  return Add(a, b);
}
template <typename F>
COLLECTIVE_HD F FloatMul(F a, F b) {
  if (IsNan(a)) return Quiet(a);
  if (IsNan(b)) return Quiet(b);
  return Mul(a, b);
}
template <typename F>
COLLECTIVE_HD F FloatMin(F a, F b) {
  if (IsNan(a)) return a;
  if (IsNan(b)) return b;
  if (a == b) return SignBit(a) ? a : b;
  return a < b ? a : b;
}
template <typename F>
COLLECTIVE_HD F FloatMax(F a, F b) {
  if (IsNan(a)) return a;
  if (IsNan(b)) return b;
  if (a == b) return SignBit(a) ? b : a;
  return a > b ? a : b;
}

// ---------------------------------------------------------------------------
// Element formats: how an element loads into its accumulator and back.

// Elements reduced in their own type: integers and float32/float64.
template <typename T, bool kIsFloat>
struct Plain {
  using Storage = T;
  using Acc = T;
  static constexpr bool kFloat = kIsFloat;
  static constexpr bool kLogical = false;
  COLLECTIVE_HD static Acc Load(const void* p, uint64_t i) { return static_cast<const T*>(p)[i]; }
  COLLECTIVE_HD static void Store(void* p, uint64_t i, Acc v) { static_cast<T*>(p)[i] = v; }
};
template <typename T>
using Integer = Plain<T, false>;
template <typename F>
using Floating = Plain<F, true>;

// float16 and bfloat16: 16 bits stored, float32 accumulated.
struct Narrow {
  using Storage = uint16_t;
  using Acc = float;
  static constexpr bool kFloat = true;
  static constexpr bool kLogical = false;
};

struct Half : Narrow {
  COLLECTIVE_HD static Acc Load(const void* p, uint64_t i) {
    const uint16_t bits = static_cast<const uint16_t*>(p)[i];
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(bits));
#else
    return HalfToFloat(bits);
#endif
  }
  COLLECTIVE_HD static void Store(void* p, uint64_t i, Acc v) {
#if defined(__CUDA_ARCH__)
    static_cast<uint16_t*>(p)[i] = __half_as_ushort(__float2half_rn(v));
#else
    static_cast<uint16_t*>(p)[i] = FloatToHalf(v);
#endif
  }
};

struct BFloat : Narrow {
  COLLECTIVE_HD static Acc Load(const void* p, uint64_t i) {
    return BitsFloat(static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16);
  }
  COLLECTIVE_HD static void Store(void* p, uint64_t i, Acc v) {
#if defined(__CUDA_ARCH__)
    static_cast<uint16_t*>(p)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
#else
    static_cast<uint16_t*>(p)[i] = FloatToBFloat16(v);
#endif
  }
};

// Any non-zero byte is true; MIN and MAX are logical and / or.
struct Bool {
  using Storage = uint8_t;
  using Acc = uint8_t;
  static constexpr bool kFloat = false;
  static constexpr bool kLogical = true;
  COLLECTIVE_HD static Acc Load(const void* p, uint64_t i) {
    return static_cast<const uint8_t*>(p)[i] != 0 ? 1 : 0;
  }
  COLLECTIVE_HD static void Store(void* p, uint64_t i, Acc v) { static_cast<uint8_t*>(p)[i] = v; }
};

// ---------------------------------------------------------------------------
// The fold.

template <typename T>
struct Limits {
  // Two's-complement bounds without <limits> on the device.
  static constexpr bool kSigned = static_cast<T>(-1) < static_cast<T>(0);
  static constexpr T kMax =
      kSigned ? static_cast<T>((static_cast<uint64_t>(1) << (8 * sizeof(T) - 1)) - 1)
              : static_cast<T>(~static_cast<T>(0));
  static constexpr T kMin = kSigned ? static_cast<T>(-kMax - 1) : static_cast<T>(0);
};

template <class Format, int kOp>
COLLECTIVE_HD typename Format::Acc Identity() {
  using Acc = typename Format::Acc;
  if constexpr (kOp == kProduct) return static_cast<Acc>(1);
  if constexpr (Format::kFloat) {
    if constexpr (kOp == kSum) return static_cast<Acc>(-0.0);  // x + -0 is x, also for -0
    const Acc infinity = sizeof(Acc) == 4 ? static_cast<Acc>(BitsFloat(0x7f800000u))
                                          : static_cast<Acc>(BitsDouble(0x7ff0000000000000ull));
    return kOp == kMin ? infinity : -infinity;
  } else if constexpr (Format::kLogical) {
    return static_cast<Acc>(kOp == kMin ? 1 : 0);  // true is the identity of and
  } else {
    if constexpr (kOp == kSum) return static_cast<Acc>(0);
    return kOp == kMin ? Limits<Acc>::kMax : Limits<Acc>::kMin;
  }
}

template <class Format, int kOp, typename A>
COLLECTIVE_HD A Apply(A a, A b) {
  if constexpr (Format::kFloat) {
    if constexpr (kOp == kSum) return FloatAdd(a, b);
    if constexpr (kOp == kProduct) return FloatMul(a, b);
    if constexpr (kOp == kMin) return FloatMin(a, b);
    if constexpr (kOp == kMax) return FloatMax(a, b);
  } else {
    // Two's-complement wrap-around, in an unsigned type at least as wide
    // as int (uint16 * uint16 would promote to a signed int).
    using W = unsigned long long;
    if constexpr (kOp == kSum) return static_cast<A>(static_cast<W>(a) + static_cast<W>(b));
    if constexpr (kOp == kProduct) return static_cast<A>(static_cast<W>(a) * static_cast<W>(b));
    if constexpr (kOp == kMin) return a < b ? a : b;
    if constexpr (kOp == kMax) return a < b ? b : a;
  }
}

// Truncates toward zero and saturates; NaN becomes 0.
template <typename T>
COLLECTIVE_HD T SaturatingCast(double value) {
  if (IsNan(value)) return 0;
  const double min = static_cast<double>(Limits<T>::kMin);
  const double max_plus_one = static_cast<double>(Limits<T>::kMax / 2 + 1) * 2.0;
  if (value <= min) return Limits<T>::kMin;
  if (value >= max_plus_one) return Limits<T>::kMax;
  return static_cast<T>(value);  // conversion truncates toward zero
}

template <class Format, int kOp>
COLLECTIVE_HD void ReduceElement(const ReduceParams& p, uint64_t i) {
  using Acc = typename Format::Acc;
  const bool has_prescale = p.prescale != 1.0;
  const double factor = p.postscale / static_cast<double>(p.divisor);
  const auto load = [&](int j) -> Acc {
    if (p.inputs[j] == nullptr) return static_cast<Acc>(0);
    const Acc x = Format::Load(p.inputs[j], i);
    if constexpr (Format::kFloat) {
      return has_prescale ? FloatMul(x, static_cast<Acc>(p.prescale)) : x;
    } else if constexpr (Format::kLogical) {
      return x;  // bool ignores scale factors
    } else {
      return has_prescale ? SaturatingCast<Acc>(static_cast<double>(x) * p.prescale) : x;
    }
  };
  Acc acc = p.input_count == 0 ? Identity<Format, kOp>() : load(0);
  for (int j = 1; j < p.input_count; ++j) acc = Apply<Format, kOp>(acc, load(j));
  if constexpr (Format::kFloat) {
    if (factor != 1.0) acc = FloatMul(acc, static_cast<Acc>(factor));
  } else if constexpr (!Format::kLogical) {
    if (p.postscale != 1.0 || p.divisor != 1) {
      acc = SaturatingCast<Acc>(static_cast<double>(acc) * p.postscale /
                                static_cast<double>(p.divisor));
    }
  }
  Format::Store(p.out, i, acc);
}

// Calls visitor.template operator()<Format, kOp>() for the params' dtype and
// op; false for a pair that has no kernel. Host code: it picks the kernel.
template <class Visitor>
inline bool Visit(int dtype, int op, Visitor&& visitor) {
  const auto with_op = [&]<class Format>() {
    switch (op) {
      case kSum:
        visitor.template operator()<Format, kSum>();
        return true;
      case kMin:
        visitor.template operator()<Format, kMin>();
        return true;
      case kMax:
        visitor.template operator()<Format, kMax>();
        return true;
      case kProduct:
        visitor.template operator()<Format, kProduct>();
        return true;
      default:
        return false;
    }
  };
  switch (dtype) {
    case kUInt8:
      return with_op.template operator()<Integer<uint8_t>>();
    case kInt8:
      return with_op.template operator()<Integer<int8_t>>();
    case kUInt16:
      return with_op.template operator()<Integer<uint16_t>>();
    case kInt16:
      return with_op.template operator()<Integer<int16_t>>();
    case kInt32:
      return with_op.template operator()<Integer<int32_t>>();
    case kInt64:
      return with_op.template operator()<Integer<int64_t>>();
    case kFloat16:
      return with_op.template operator()<Half>();
    case kBFloat16:
      return with_op.template operator()<BFloat>();
    case kFloat32:
      return with_op.template operator()<Floating<float>>();
    case kFloat64:
      return with_op.template operator()<Floating<double>>();
    case kBool:
      return (op == kMin || op == kMax) && with_op.template operator()<Bool>();
    default:
      return false;
  }
}

}  // namespace collective::daemon::gpu::math
