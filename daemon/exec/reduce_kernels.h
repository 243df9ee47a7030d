// Element-wise reduction of k input buffers into one output: the CPU hot loop
// of every allreduce and reducescatter. One call reduces one contiguous range;
// the executor splits large buffers across threads (the result does not
// depend on the split, only on the fixed input order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "collective/v1/types.pb.h"

namespace collective::daemon::exec {

struct ReduceSpec {
  v1::DataType dtype = v1::DATA_TYPE_UNSPECIFIED;
  // SUM, MIN, MAX or PRODUCT. The caller turns AVERAGE into SUM with
  // divisor = number of ranks.
  v1::ReduceOp op = v1::REDUCE_OP_SUM;
  double prescale = 1.0;   // applied to every input element before reducing
  double postscale = 1.0;  // applied to the result
  int64_t divisor = 1;     // the result is divided by this after postscale
};

// Whether Reduce supports `op` on `dtype`: every op on every numeric type;
// only MIN (logical and) and MAX (logical or) on BOOL; never ADASUM or
// AVERAGE (see ReduceSpec::op).
bool IsReducible(v1::DataType dtype, v1::ReduceOp op);

// out[i] = scale(x_0[i] op x_1[i] op ... op x_{k-1}[i]), folded left to right
// in input order, where x_j[i] = prescale * inputs[j][i] when prescale != 1.
//
// Arithmetic:
//  - float16 and bfloat16 are widened to float32, reduced and scaled in
//    float32, and rounded back once (round to nearest even; conversions as in
//    common/half.h);
//  - float32 is reduced in float32, float64 in float64; scale factors are
//    applied as a multiplication by static_cast<Acc>(factor): prescale to
//    every input element when prescale != 1, and the final factor
//    postscale / divisor, computed in double, to the result when that double
//    is != 1; no multiply-add is ever fused;
//  - integers are reduced in their own type with two's-complement wrap-around;
//    when prescale != 1 each input element becomes
//    saturate(trunc(double(x) * prescale)), and when postscale != 1 or
//    divisor != 1 the result becomes
//    saturate(trunc(double(acc) * postscale / double(divisor))), saturating to
//    the type's range (NaN becomes 0);
//  - NaN operands, in the accumulator's precision: every operation (op or
//    scale) returns its left operand if that is NaN, else its right one if
//    that is, payload kept; SUM, PRODUCT and scaling make it quiet. So MIN and
//    MAX propagate NaN like torch.minimum, and two NaNs give the same bits
//    whatever the compiler's operand order. -0 orders below +0 in MIN/MAX;
//  - BOOL: any non-zero byte is true; the output is 0 or 1; scale factors are
//    ignored.
//
// Buffers need no particular alignment. `out` may alias inputs[0] exactly; it
// must not partially overlap any input. Large ranges are written with
// non-temporal stores (the result is not left in cache). Requires
// IsReducible(spec.dtype, spec.op) and !inputs.empty().
void Reduce(const ReduceSpec& spec, std::span<const void* const> inputs, void* out, size_t count);

}  // namespace collective::daemon::exec
