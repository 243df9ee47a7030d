#include "daemon/exec/ops/work_list.h"

#include <algorithm>
#include <cstring>

#include "common/dtype.h"
#include "daemon/exec/adasum_kernel.h"
#include "daemon/exec/stream_copy.h"

namespace collective::daemon::exec::ops {

void WorkList::AddCopy(std::byte* destination, const std::byte* source, uint64_t bytes,
                       const Outputs& copies) {
  bytes_ += bytes * (1 + 2 * copies.size());
  const uint64_t per_piece = copies.empty() ? kPieceBytes : kCopyPieceBytes;
  for (uint64_t done = 0; done < bytes; done += per_piece) {
    Piece piece;
    piece.copy = true;
    piece.inputs.push_back(source + done);
    piece.out = destination != nullptr ? destination + done : nullptr;
    for (std::byte* copy : copies) piece.copies.push_back(copy + done);
    piece.count = std::min(per_piece, bytes - done);
    piece.stream_copies = bytes >= kStreamCopyBytes;
    pieces_.push_back(std::move(piece));
  }
}

void WorkList::AddReduce(const exec::ReduceSpec& spec, const Inputs& inputs, std::byte* out,
                         uint64_t count, const Outputs& copies) {
  const uint64_t element = ElementSize(spec.dtype);
  const uint64_t per_piece =
      std::max<uint64_t>(1, (copies.empty() ? kPieceBytes : kCopyPieceBytes) / element);
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
    piece.stream_copies = count * element >= kStreamCopyBytes;
    pieces_.push_back(std::move(piece));
  }
}

void WorkList::AddAdasum(const exec::ReduceSpec& spec, const Inputs& inputs, std::byte* out,
                         uint64_t count, const Outputs& copies) {
  const uint64_t bytes = count * ElementSize(spec.dtype);
  bytes_ += bytes * (inputs.size() + 1 + 2 * copies.size());
  Piece piece;
  piece.spec = spec;
  piece.inputs = inputs;
  piece.out = out;
  piece.copies = copies;
  piece.count = count;
  piece.stream_copies = bytes >= kStreamCopyBytes;
  pieces_.push_back(std::move(piece));
}

namespace {

// Which of a piece's copies are written with streaming stores: with
// stream_copies, those whose lines are not in cache. Block by block, an
// in-place output's lines were just read (they are); Adasum copies only
// after its pass over the whole tensor, when none are.
absl::InlinedVector<bool, 8> Streamed(const WorkList::Inputs& inputs,
                                      const WorkList::Outputs& copies, bool stream_copies,
                                      bool whole_range_first) {
  absl::InlinedVector<bool, 8> streamed(copies.size(), false);
  for (size_t c = 0; stream_copies && c < copies.size(); ++c) {
    streamed[c] =
        whole_range_first || std::find(inputs.begin(), inputs.end(), copies[c]) == inputs.end();
  }
  return streamed;
}

void CopyOut(std::byte* copy, const std::byte* from, uint64_t bytes, bool streamed) {
  if (streamed) {
    exec::StreamCopy(copy, from, bytes);
  } else {
    std::memcpy(copy, from, bytes);
  }
}

}  // namespace

void WorkList::Run(size_t index) const {
  const Piece& piece = pieces_[index];
  const bool adasum = !piece.copy && piece.spec.op == v1::REDUCE_OP_ADASUM;
  const absl::InlinedVector<bool, 8> streamed =
      Streamed(piece.inputs, piece.copies, piece.stream_copies, adasum);
  const bool any_streamed = std::find(streamed.begin(), streamed.end(), true) != streamed.end();
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
      for (size_t c = 0; c < piece.copies.size(); ++c) {
        CopyOut(piece.copies[c] + skip, from, bytes, streamed[c]);
      }
    }
    if (any_streamed) exec::StreamFence();
    return;
  }
  absl::InlinedVector<const void*, 16> inputs(piece.inputs.begin(), piece.inputs.end());
  if (adasum) {
    // The zeros buffer is only kPieceBytes long; the kernel reads null as zeros.
    for (const void*& input : inputs) {
      if (input == zeros_) input = nullptr;
    }
    exec::Adasum(piece.spec.dtype, inputs, piece.out, piece.count, piece.spec.prescale,
                 piece.spec.postscale);
    const uint64_t bytes = piece.count * ElementSize(piece.spec.dtype);
    for (size_t c = 0; c < piece.copies.size(); ++c) {
      CopyOut(piece.copies[c], piece.out, bytes, streamed[c]);
    }
    if (any_streamed) exec::StreamFence();
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
    for (size_t c = 0; c < piece.copies.size(); ++c) {
      CopyOut(piece.copies[c] + skip, result, count * element, streamed[c]);
    }
  }
  if (any_streamed) exec::StreamFence();
}

}  // namespace collective::daemon::exec::ops
