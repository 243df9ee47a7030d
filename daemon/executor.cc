#include "daemon/executor.h"

#include <algorithm>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "daemon/job.h"
#include "daemon/reduce_kernels.h"

namespace collective::daemon {
namespace {

// Work is split into pieces of this size so that every thread gets a share
// of a large tensor and of many small ones. 4 MiB because the kernels stream
// outputs of that size past the cache (non-temporal stores), which made a
// 64 MiB allreduce a third faster than 1 MiB pieces did. Below kInlineBytes
// waking the pool costs more than it saves.
constexpr uint64_t kPieceBytes = 4 << 20;
constexpr uint64_t kInlineBytes = 256 << 10;

struct Piece {
  size_t tensor;
  uint64_t first;  // element
  uint64_t count;
};

exec::ReduceSpec SpecOf(const ReadyTensor& tensor) {
  const v1::TensorRequest& request = tensor.submissions.front().request;
  exec::ReduceSpec spec;
  spec.dtype = request.dtype();
  spec.op = request.op();
  if (spec.op == v1::REDUCE_OP_AVERAGE) {
    spec.op = v1::REDUCE_OP_SUM;
    spec.divisor = static_cast<int64_t>(tensor.submissions.size());
  }
  spec.prescale = request.has_prescale() ? request.prescale() : 1.0;
  spec.postscale = request.has_postscale() ? request.postscale() : 1.0;
  return spec;
}

}  // namespace

Executor::Outcome Executor::RunAllreduce(const FusedBatch& batch, ResultArena& results) {
  Outcome outcome;
  uint32_t readers = 0;
  for (const ReadyTensor& tensor : batch.tensors) {
    readers += static_cast<uint32_t>(tensor.submissions.size());
  }
  if (batch.bytes > results.capacity()) {
    outcome.status = absl::ResourceExhaustedError(
        absl::StrCat("the result of '", batch.tensors.front().name, "' needs ", batch.bytes,
                     " bytes but the job's result arena has ", results.capacity(),
                     " (raise result_arena_bytes in the daemon's configuration)"));
    return outcome;
  }
  const auto block = results.Allocate(batch.bytes, readers);
  if (!block.has_value()) {
    outcome.deferred = true;
    return outcome;
  }
  outcome.block = *block;

  std::vector<exec::ReduceSpec> specs;
  std::vector<Piece> pieces;
  uint64_t slot = *block;
  for (size_t t = 0; t < batch.tensors.size(); ++t) {
    const ReadyTensor& tensor = batch.tensors[t];
    specs.push_back(SpecOf(tensor));
    outcome.offsets.push_back(slot);
    slot += SlotBytes(tensor);
    const uint64_t element = ElementSize(specs.back().dtype);
    const uint64_t count = tensor.submissions.front().request.length() / element;
    const uint64_t per_piece = std::max<uint64_t>(1, kPieceBytes / element);
    for (uint64_t first = 0; first < count; first += per_piece) {
      pieces.push_back({t, first, std::min(per_piece, count - first)});
    }
  }

  std::byte* data = results.data();
  auto reduce_piece = [&](size_t index) {
    const Piece& piece = pieces[index];
    const ReadyTensor& tensor = batch.tensors[piece.tensor];
    const uint64_t element = ElementSize(specs[piece.tensor].dtype);
    const uint64_t skip = piece.first * element;
    absl::InlinedVector<const void*, 16> inputs;
    inputs.reserve(tensor.submissions.size());
    for (const Submission& submission : tensor.submissions) {
      inputs.push_back(submission.client->segment->arena() + submission.request.offset() + skip);
    }
    exec::Reduce(specs[piece.tensor], inputs, data + outcome.offsets[piece.tensor] + skip,
                 piece.count);
  };
  if (batch.bytes < kInlineBytes) {
    for (size_t i = 0; i < pieces.size(); ++i) reduce_piece(i);
  } else {
    pool_.Run(pieces.size(), reduce_piece);
  }

  // A client that truncated its segment under us left zeros in the inputs.
  for (const ReadyTensor& tensor : batch.tensors) {
    for (const Submission& submission : tensor.submissions) {
      ClientRecord* client = submission.client;
      if (client->guard.faulted() && std::find(outcome.corrupted.begin(), outcome.corrupted.end(),
                                               client) == outcome.corrupted.end()) {
        outcome.corrupted.push_back(client);
      }
    }
  }
  if (!outcome.corrupted.empty()) {
    results.Discard(outcome.block);
    outcome.status = SegmentTruncated(*outcome.corrupted.front());
  } else if (results.faulted()) {
    results.Discard(outcome.block);
    outcome.results_lost = true;
    outcome.status = absl::DataLossError(
        "the job's result segment was truncated under the daemon (only a client that owns it "
        "can do that); the job cannot continue");
  }
  return outcome;
}

}  // namespace collective::daemon
