// The copies and reductions of one fused batch, cut into pieces that every
// thread of the pool can take. Pieces are at most kPieceBytes: small enough
// to share a large tensor among threads, large enough that the kernels stream
// their output past the cache (non-temporal stores start at 4 MiB), which
// made a 64 MiB allreduce a third faster than 1 MiB pieces did.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "daemon/exec/reduce_kernels.h"

namespace collective::daemon::exec::ops {

inline constexpr uint64_t kPieceBytes = 4 << 20;
// A reduction or a copy with copies runs in blocks of at most this many bytes of
// result, so that a block's inputs, its result and the copies' lines are
// still in cache when the copies are written (nothing of it is streamed).
// Measured on the ResNet-50 gradient set reduced in place into 4 clients'
// arenas: 8 and 16 KiB blocks took 23–24 ms, 64 KiB 26.5 ms, 256 KiB 27.3
// ms, whole 4 MiB pieces (streamed, then read back per copy) 32–34 ms.
inline constexpr uint64_t kCopyBlockBytes = 16 << 10;
// Pieces with copies stream nothing (their blocks stay in cache), so they
// are cut finer: a 4 MiB tensor whose result goes into every rank's output
// would otherwise be one thread's work while the other cores wait.
inline constexpr uint64_t kCopyPieceBytes = 1024 << 10;
// A range of at least this many bytes with copies writes the copies that
// are not also inputs with streaming stores (exec::StreamCopy): those lines
// are not in cache, and reading each for ownership before writing it would
// cost one more pass over the output than the copy itself. Smaller ones
// stay in cache for the client that reads them next.
inline constexpr uint64_t kStreamCopyBytes = 2 << 20;

class WorkList {
 public:
  using Inputs = absl::InlinedVector<const std::byte*, 16>;
  using Outputs = absl::InlinedVector<std::byte*, 8>;

  // `zeros` points at kPieceBytes of zeros that stand for the inputs of
  // ranks that have joined; it is read at the same place for every piece.
  explicit WorkList(const std::byte* zeros) : zeros_(zeros) {}

  const std::byte* zeros() const { return zeros_; }

  // `copies` also receive the bytes, each block (kCopyBlockBytes) copied
  // from `destination` while it is in cache (as AddReduce's copies are);
  // with a null `destination` the copies alone receive them, from `source`.
  void AddCopy(std::byte* destination, const std::byte* source, uint64_t bytes,
               const Outputs& copies = {});
  // `copies` also receive the result, each block (kCopyBlockBytes) copied
  // from `out` as soon as it is reduced: an output that is also an input (an
  // in-place allreduce into a client's arena) is overwritten only after the
  // block that reads that range has been reduced. A copy must be an input
  // exactly or lie apart from every input. `out` may be null when `copies`
  // are all the result is wanted in: the blocks are then reduced into
  // scratch memory that stays in cache.
  void AddReduce(const exec::ReduceSpec& spec, const Inputs& inputs, std::byte* out, uint64_t count,
                 const Outputs& copies = {});
  // One piece however large: Adasum's coefficients need the whole tensor's
  // dot products (spec.op is REDUCE_OP_ADASUM; divisor 1). `copies` receive
  // the result once all of it is in `out`, so they may be inputs too.
  void AddAdasum(const exec::ReduceSpec& spec, const Inputs& inputs, std::byte* out, uint64_t count,
                 const Outputs& copies = {});

  size_t size() const { return pieces_.size(); }
  uint64_t bytes() const { return bytes_; }
  void Run(size_t index) const;

 private:
  struct Piece {
    exec::ReduceSpec spec;  // unused for copies
    Inputs inputs;          // one source for a copy
    std::byte* out = nullptr;
    Outputs copies;      // where `out` is copied once reduced (or copied)
    uint64_t count = 0;  // elements for reductions, bytes for copies
    bool copy = false;
    bool stream_copies = false;  // kStreamCopyBytes
  };

  const std::byte* zeros_;
  std::vector<Piece> pieces_;
  uint64_t bytes_ = 0;
};

}  // namespace collective::daemon::exec::ops
