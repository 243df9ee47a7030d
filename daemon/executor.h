// Runs fused batches on the CPU: allocates the batch's result block in the
// job's result segment and reduces every tensor's inputs, straight from the
// clients' arenas, into its slot. Large batches are split into pieces that
// the thread pool shares.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "daemon/client_record.h"
#include "daemon/fusion.h"
#include "daemon/result_arena.h"
#include "daemon/thread_pool.h"

namespace collective::daemon {

class Executor {
 public:
  explicit Executor(ThreadPool& pool) : pool_(pool) {}

  struct Outcome {
    // No result space right now: run the batch again after releases.
    bool deferred = false;
    // Otherwise: OK, or the error that every rank of every tensor receives.
    absl::Status status;
    uint64_t block = 0;
    std::vector<uint64_t> offsets;  // per tensor, in the result segment's data
    // Clients whose segment vanished under the reduction (see SigbusGuard).
    std::vector<ClientRecord*> corrupted;
    // The result segment itself vanished (a client that owns it truncated it).
    bool results_lost = false;
  };

  Outcome RunAllreduce(const FusedBatch& batch, ResultArena& results);

 private:
  ThreadPool& pool_;
};

}  // namespace collective::daemon
