// Runs fused batches on the CPU: allocates the batch's result block in the
// job's result segment and has each tensor's op fill its slot — reductions
// straight from the clients' arenas, copies for the gathering collectives —
// with the work cut into pieces that the thread pool shares.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "daemon/exec/fusion.h"
#include "daemon/exec/thread_pool.h"
#include "daemon/job/client_record.h"
#include "daemon/job/result_arena.h"
#include "daemon/negotiation/coordinator.h"

namespace collective::daemon::exec {

class Executor {
 public:
  explicit Executor(ThreadPool& pool);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  struct Outcome {
    // No result space right now: run the batch again after releases.
    bool deferred = false;
    // Otherwise: OK, or the error that every rank of every tensor receives.
    absl::Status status;
    uint64_t block = 0;
    std::vector<uint64_t> slots;  // per tensor, in the result segment's data
    // Clients whose segment vanished under the work (see SigbusGuard).
    std::vector<job::ClientRecord*> corrupted;
    // The result segment itself vanished (a client that owns it truncated it).
    bool results_lost = false;
    Clock::time_point started;
    Clock::time_point finished;
  };

  // Every tensor of `batch` has passed its op's Check.
  Outcome Run(const FusedBatch& batch, job::ResultArena& results);

  // The first half of Run, for work that runs elsewhere (a batch across
  // nodes): the batch's block and its tensors' slots, or why not (deferred
  // or an error).
  Outcome Reserve(const FusedBatch& batch, job::ResultArena& results) const;
  // The last half: whether a client truncated its segment, or the result
  // segment vanished, under the work; if so the block is discarded and the
  // outcome carries the error.
  void CheckFaults(const FusedBatch& batch, job::ResultArena& results, Outcome& outcome) const;

  // kPieceBytes of zeros: the inputs of ranks that joined.
  const std::byte* zeros() const { return zeros_; }

 private:
  ThreadPool& pool_;
  // Zeros that stand for joined ranks' inputs (read-only, one piece long).
  const std::byte* zeros_;
};

}  // namespace collective::daemon::exec
