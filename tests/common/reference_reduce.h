// The test oracle for exec::Reduce and the deterministic data fed to it. The
// reference is a plain element-by-element loop written from the contract in
// daemon/reduce_kernels.h, independently of the fast kernels, so that unit and
// integration tests can demand bitwise-equal results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "collective/v1/types.pb.h"
#include "daemon/exec/reduce_kernels.h"

namespace collective::testing {

// Same contract as exec::Reduce (including MIN/MAX on NaN and signed zeros).
void ReferenceReduce(const daemon::exec::ReduceSpec& spec, std::span<const void* const> inputs,
                     void* out, size_t count);

// Fills `count` elements of `dtype` with pseudo-random values that depend only
// on (dtype, op, seed, index), so that every rank of a test can compute every
// other rank's data. Floats stay small and short (multiples of 1/8 in [-4, 4],
// or [0.5, 1.5] for PRODUCT) so that sums and products of a few ranks are
// exact or nearly so; integers sometimes cover their full range so that
// wrap-around is exercised; bools are mostly 0/1 with a few other non-zero
// bytes. Never NaN or infinite.
void FillTestData(v1::DataType dtype, v1::ReduceOp op, uint64_t seed, void* out, size_t count);

// Empty when the two buffers hold the same bits, else a description of the
// first differing element (index and both values) and how many differ. NaNs
// are equal only when their bits are.
std::string CompareBitwise(v1::DataType dtype, const void* expected, const void* actual,
                           size_t count);

// Like CompareBitwise for integers and bool; floating-point elements may
// differ by a few units in the last place of their type (|e - a| <=
// tolerance * max(1, |e|), the tolerance chosen per type): what a reduction
// folded in another order — across nodes: each node's partial result first —
// rounds to.
std::string CompareClose(v1::DataType dtype, const void* expected, const void* actual,
                         size_t count);

}  // namespace collective::testing
