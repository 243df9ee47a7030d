#include "daemon/exec/executor.h"

#include <algorithm>
#include <cstdlib>

#include <sys/mman.h>

#include "absl/strings/str_cat.h"
#include "daemon/exec/ops/collective_op.h"
#include "daemon/job/job.h"

namespace collective::daemon::exec {
Executor::Executor(ThreadPool& pool) : pool_(pool) {
  void* zeros = ::mmap(nullptr, ops::kPieceBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (zeros == MAP_FAILED) std::abort();  // 4 MiB of address space at start-up
  zeros_ = static_cast<const std::byte*>(zeros);
}

Executor::~Executor() { ::munmap(const_cast<std::byte*>(zeros_), ops::kPieceBytes); }

Executor::Outcome Executor::Reserve(const FusedBatch& batch, job::ResultArena& results) const {
  Outcome outcome;
  uint32_t readers = 0;
  for (const negotiation::ReadyTensor& tensor : batch.tensors) {
    readers += static_cast<uint32_t>(tensor.submissions.size());
  }
  if (batch.bytes > results.capacity()) {
    outcome.status = absl::ResourceExhaustedError(
        absl::StrCat("the result of '", batch.tensors.front().name, "' needs ", batch.bytes,
                     " bytes but the job's result arena has ", results.capacity(),
                     " (raise result_arena_bytes in the daemon's configuration)"));
    return outcome;
  }
  // A block no local rank reads (every one joined) is released at once.
  const auto block = results.Allocate(batch.bytes, std::max<uint32_t>(readers, 1));
  if (!block.has_value()) {
    outcome.deferred = true;
    return outcome;
  }
  outcome.block = *block;
  uint64_t slot = *block;
  for (const negotiation::ReadyTensor& tensor : batch.tensors) {
    outcome.slots.push_back(slot);
    slot += SlotBytes(tensor);
  }
  return outcome;
}

Executor::Outcome Executor::Run(const FusedBatch& batch, job::ResultArena& results) {
  Outcome outcome = Reserve(batch, results);
  if (outcome.deferred || !outcome.status.ok()) return outcome;
  outcome.started = Clock::now();
  ops::WorkList work(zeros_);
  for (size_t t = 0; t < batch.tensors.size(); ++t) {
    const negotiation::ReadyTensor& tensor = batch.tensors[t];
    ops::OpFor(tensor.request())->AddWork(tensor, results.data() + outcome.slots[t], work);
  }
  if (work.bytes() < ThreadPool::kInlineBytes) {
    for (size_t i = 0; i < work.size(); ++i) work.Run(i);
  } else {
    pool_.Run(work.size(), [&work](size_t i) { work.Run(i); });
  }
  outcome.finished = Clock::now();
  CheckFaults(batch, results, outcome);
  return outcome;
}

void Executor::CheckFaults(const FusedBatch& batch, job::ResultArena& results,
                           Outcome& outcome) const {
  // A client that truncated its segment under us left zeros in the inputs.
  for (const negotiation::ReadyTensor& tensor : batch.tensors) {
    for (const negotiation::Submission& submission : tensor.submissions) {
      job::ClientRecord* client = submission.client;
      if (client->guard.faulted() && std::find(outcome.corrupted.begin(), outcome.corrupted.end(),
                                               client) == outcome.corrupted.end()) {
        outcome.corrupted.push_back(client);
      }
    }
  }
  if (!outcome.corrupted.empty()) {
    results.Discard(outcome.block);
    outcome.status = job::SegmentTruncated(*outcome.corrupted.front());
  } else if (results.faulted()) {
    results.Discard(outcome.block);
    outcome.results_lost = true;
    outcome.status = absl::DataLossError(
        "the job's result segment was truncated under the daemon (only a client that owns it "
        "can do that); the job cannot continue");
  }
}

}  // namespace collective::daemon::exec
