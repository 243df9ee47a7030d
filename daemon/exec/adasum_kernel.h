// Adasum (adaptive summation) of k input buffers into one output, as Horovod
// 0.28 computes it: the CPU kernel of allreduce with op=Adasum. Pure
// function; whichever pool thread runs an allreduce's work calls it, one
// tensor per call (the dot products and norms are the whole tensor's, so a
// tensor is never split across threads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "collective/v1/types.pb.h"

namespace collective::daemon::exec {

// Whether Adasum is defined for `dtype`: the floating-point types only.
bool IsAdasumType(v1::DataType dtype);

// Whether `ranks` inputs can be combined: Horovod's Adasum pairs rank r with
// r ^ 1, then r ^ 2, ..., so it needs a power of two (Horovod refuses other
// sizes too).
bool IsAdasumSize(int64_t ranks);

// Adasum of two vectors:
//   Adasum(a, b) = (1 - a·b / (2‖a‖²))·a + (1 - a·b / (2‖b‖²))·b,
// where a coefficient is 1 when its vector's ‖·‖² is below 1e-8 (Horovod's
// guard against zero norms). k inputs combine as a binary tree in input
// order: first (0,1), (2,3), ...; then the pairs' results pairwise; and so on,
// the lower-numbered group on the left. This is the result of Horovod's
// vector-halving distance-doubling exchange, where rank r meets r ^ 1, then
// r ^ 2, ...
//
// Arithmetic, as Horovod's CPU kernels: dot products and norms accumulate in
// double; each level's result is rounded to the tensor's type; float32 and
// float64 combine in double, float16 and bfloat16 in float with the
// coefficients rounded to float (b·bc fused with a·ac, as Horovod's F16C
// kernel does). When prescale != 1 every input element is first scaled and
// rounded to its type, and when postscale != 1 the result is scaled at the
// end (Horovod scales its fusion buffer likewise).
//
// A null input stands for zeros (a rank that has joined). Requires
// IsAdasumType(dtype), IsAdasumSize(inputs.size()); `out` must not overlap
// any input; buffers need no particular alignment.
void Adasum(v1::DataType dtype, std::span<const void* const> inputs, void* out, size_t count,
            double prescale, double postscale);

}  // namespace collective::daemon::exec
