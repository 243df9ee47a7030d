#include "daemon/exec/ops/work_list.h"

#include <algorithm>
#include <cstring>

#include "common/dtype.h"
#include "daemon/exec/adasum_kernel.h"

namespace collective::daemon::exec::ops {

void WorkList::AddCopy(std::byte* destination, const std::byte* source, uint64_t bytes,
                       const Outputs& copies) {
  bytes_ += bytes * (1 + 2 * copies.size());
  for (uint64_t done = 0; done < bytes; done += kPieceBytes) {
    Piece piece;
    piece.copy = true;
    piece.inputs.push_back(source + done);
    piece.out = destination != nullptr ? destination + done : nullptr;
    for (std::byte* copy : copies) piece.copies.push_back(copy + done);
    piece.count = std::min(kPieceBytes, bytes - done);
    pieces_.push_back(std::move(piece));
  }
}

void WorkList::AddReduce(const exec::ReduceSpec& spec, const Inputs& inputs, std::byte* out,
                         uint64_t count, const Outputs& copies) {
  const uint64_t element = ElementSize(spec.dtype);
  const uint64_t per_piece = std::max<uint64_t>(1, kPieceBytes / element);
  bytes_ += count * element * (inputs.size() + 1 + 2 * copies.size());
  for (uint64_t first = 0; first < count; first += per_piece) {
    Piece piece;
    piece.spec = spec;
    const uint64_t skip = first * element;
    for (const std::byte* input : inputs) {
      piece.inputs.push_back(input == zeros_ ? zeros_ : input + skip);
    }
    piece.out = out != nullptr ? out + skip : nullptr;
    for (std::byte* copy : copies) piece.copies.push_back(copy + skip);
    piece.count = std::min(per_piece, count - first);
    pieces_.push_back(std::move(piece));
  }
}

void WorkList::AddAdasum(const exec::ReduceSpec& spec, const Inputs& inputs, std::byte* out,
                         uint64_t count) {
  bytes_ += count * ElementSize(spec.dtype) * (inputs.size() + 1);
  Piece piece;
  piece.spec = spec;
  piece.inputs = inputs;
  piece.out = out;
  piece.count = count;
  pieces_.push_back(std::move(piece));
}

void WorkList::Run(size_t index) const {
  const Piece& piece = pieces_[index];
  if (piece.copy) {
    // With copies, block by block: each block of the source is read from
    // memory once, and every copy is written from cache (a 4 MiB piece would
    // be streamed past the cache and read back once per copy).
    const std::byte* source = piece.inputs.front();
    const uint64_t step = piece.copies.empty() ? piece.count : kCopyBlockBytes;
    for (uint64_t skip = 0; skip < piece.count; skip += step) {
      const uint64_t bytes = std::min(step, piece.count - skip);
      const std::byte* from = source + skip;
      if (piece.out != nullptr) {
        std::memcpy(piece.out + skip, from, bytes);
        from = piece.out + skip;
      }
      for (std::byte* copy : piece.copies) std::memcpy(copy + skip, from, bytes);
    }
    return;
  }
  absl::InlinedVector<const void*, 16> inputs(piece.inputs.begin(), piece.inputs.end());
  if (piece.spec.op == v1::REDUCE_OP_ADASUM) {
    // The zeros buffer is only kPieceBytes long; the kernel reads null as zeros.
    for (const void*& input : inputs) {
      if (input == zeros_) input = nullptr;
    }
    exec::Adasum(piece.spec.dtype, inputs, piece.out, piece.count, piece.spec.prescale,
                 piece.spec.postscale);
    return;
  }
  if (piece.copies.empty()) {
    if (piece.out != nullptr) exec::Reduce(piece.spec, inputs, piece.out, piece.count);
    return;
  }
  // Block by block: each block's result is copied while it is still in
  // cache, and so are the lines of the copies that are also inputs (an
  // in-place allreduce), which the block's reduction has just read. Without
  // an `out`, each block is reduced into this thread's scratch block, which
  // stays in cache and is never written back to memory.
  alignas(64) thread_local std::byte scratch[kCopyBlockBytes];
  const uint64_t element = ElementSize(piece.spec.dtype);
  const uint64_t per_block = std::max<uint64_t>(1, kCopyBlockBytes / element);
  absl::InlinedVector<const void*, 16> block(inputs.size());
  for (uint64_t first = 0; first < piece.count; first += per_block) {
    const uint64_t skip = first * element;
    const uint64_t count = std::min(per_block, piece.count - first);
    for (size_t i = 0; i < inputs.size(); ++i) {
      block[i] = static_cast<const std::byte*>(inputs[i]) + skip;
    }
    std::byte* result = piece.out != nullptr ? piece.out + skip : scratch;
    exec::Reduce(piece.spec, block, result, count);
    for (std::byte* copy : piece.copies) std::memcpy(copy + skip, result, count * element);
  }
}

}  // namespace collective::daemon::exec::ops
