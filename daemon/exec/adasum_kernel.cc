// The tree is evaluated depth first: the left half's result goes straight to
// `out`, the right half's to a scratch buffer of its depth, so k inputs need
// log2(k) - 1 scratch buffers rather than k / 2.
#include "daemon/exec/adasum_kernel.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/half.h"
#include "daemon/exec/raw_memory.h"

namespace collective::daemon::exec {
namespace {

// How one element is widened and narrowed, and the precision a level's
// linear combination is computed in.
template <typename T>
struct Wide {  // float32, float64: combined in double
  using Storage = T;
  static double Load(const void* p, size_t i) { return LoadRaw<T>(p, i); }
  static void Store(void* p, size_t i, double v) { StoreRaw<T>(p, i, static_cast<T>(v)); }
  static double Combine(double ac, double a, double bc, double b) { return ac * a + bc * b; }
};

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
struct Narrow {  // float16, bfloat16: combined in float
  using Storage = uint16_t;
  static double Load(const void* p, size_t i) { return ToFloat(LoadRaw<uint16_t>(p, i)); }
  static void Store(void* p, size_t i, double v) {
    StoreRaw<uint16_t>(p, i, FromFloat(static_cast<float>(v)));
  }
  static double Combine(double ac, double a, double bc, double b) {
    const float scaled_a = static_cast<float>(ac) * static_cast<float>(a);
    return std::fma(static_cast<float>(bc), static_cast<float>(b), scaled_a);
  }
};

using Half = Narrow<HalfToFloat, FloatToHalf>;
using BFloat = Narrow<BFloat16ToFloat, FloatToBFloat16>;

// One operand of a pairwise step: an input (maybe scaled, maybe zeros) or an
// earlier level's result.
template <typename F>
struct Operand {
  const void* data = nullptr;  // null: zeros
  double scale = 1.0;

  double operator[](size_t i) const {
    if (data == nullptr) return 0.0;
    const double value = F::Load(data, i);
    if (scale == 1.0) return value;
    // Rounded to the type, as Horovod's scaled fusion buffer is.
    typename F::Storage rounded;
    F::Store(&rounded, 0, scale * value);
    return F::Load(&rounded, 0);
  }
};

template <typename F>
class Tree {
 public:
  Tree(std::span<const void* const> inputs, size_t count, double prescale)
      : inputs_(inputs), count_(count), prescale_(prescale) {
    // One buffer per depth with a right half of more than one input; sized
    // before the recursion so that no buffer moves while it is in use.
    for (size_t n = inputs.size(); n > 2; n /= 2) scratch_.emplace_back(count);
  }

  // Writes the Adasum of inputs_[first, first + n) to `out`.
  void Run(size_t first, size_t n, void* out, size_t depth) {
    if (n == 1) {
      const Operand<F> only = Leaf(first);
      for (size_t i = 0; i < count_; ++i) F::Store(out, i, only[i]);
      return;
    }
    if (n == 2) {
      Pair(Leaf(first), Leaf(first + 1), out);
      return;
    }
    std::vector<typename F::Storage>& right = scratch_[depth];
    Run(first, n / 2, out, depth + 1);
    Run(first + n / 2, n / 2, right.data(), depth + 1);
    Pair(Operand<F>{out}, Operand<F>{right.data()}, out);
  }

 private:
  Operand<F> Leaf(size_t index) const { return {inputs_[index], prescale_}; }

  // out = ac·a + bc·b; `out` may be a's buffer (each element is read before
  // it is written).
  void Pair(const Operand<F>& a, const Operand<F>& b, void* out) const {
    double dot = 0.0;
    double a_norm = 0.0;
    double b_norm = 0.0;
    for (size_t i = 0; i < count_; ++i) {
      const double x = a[i];
      const double y = b[i];
      dot += x * y;
      a_norm += x * x;
      b_norm += y * y;
    }
    const double ac = a_norm >= 1e-8 ? 1.0 - dot / a_norm * 0.5 : 1.0;
    const double bc = b_norm >= 1e-8 ? 1.0 - dot / b_norm * 0.5 : 1.0;
    for (size_t i = 0; i < count_; ++i) F::Store(out, i, F::Combine(ac, a[i], bc, b[i]));
  }

  std::span<const void* const> inputs_;
  size_t count_;
  double prescale_;
  std::vector<std::vector<typename F::Storage>> scratch_;
};

template <typename F>
void Run(std::span<const void* const> inputs, void* out, size_t count, double prescale,
         double postscale) {
  Tree<F>(inputs, count, prescale).Run(0, inputs.size(), out, 0);
  if (postscale == 1.0) return;
  for (size_t i = 0; i < count; ++i) F::Store(out, i, postscale * F::Load(out, i));
}

}  // namespace

bool IsAdasumType(v1::DataType dtype) {
  return dtype == v1::DATA_TYPE_FLOAT16 || dtype == v1::DATA_TYPE_BFLOAT16 ||
         dtype == v1::DATA_TYPE_FLOAT32 || dtype == v1::DATA_TYPE_FLOAT64;
}

bool IsAdasumSize(int64_t ranks) { return ranks > 0 && (ranks & (ranks - 1)) == 0; }

void Adasum(v1::DataType dtype, std::span<const void* const> inputs, void* out, size_t count,
            double prescale, double postscale) {
  switch (dtype) {
    case v1::DATA_TYPE_FLOAT16:
      return Run<Half>(inputs, out, count, prescale, postscale);
    case v1::DATA_TYPE_BFLOAT16:
      return Run<BFloat>(inputs, out, count, prescale, postscale);
    case v1::DATA_TYPE_FLOAT32:
      return Run<Wide<float>>(inputs, out, count, prescale, postscale);
    case v1::DATA_TYPE_FLOAT64:
      return Run<Wide<double>>(inputs, out, count, prescale, postscale);
    default:
      return;  // excluded by IsAdasumType
  }
}

}  // namespace collective::daemon::exec
