// One fused batch whose process set spans nodes, carried out without
// blocking the engine: stage by stage, this node's local work runs on the
// thread pool's workers while the engine thread drives the transfers
// of the stages before it (the pipelining of a large allreduce; less than
// ThreadPool::kInlineBytes of it runs on the engine thread at once), and the
// work after a stage's transfers runs once they complete. The engine calls
// Advance whenever it loops; every node of the set runs the same stages and
// starts their transfers, through the transport among the daemons, in the
// same order.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "daemon/exec/node_transport.h"
#include "daemon/exec/thread_pool.h"
#include "daemon/negotiation/coordinator.h"

namespace collective::daemon::exec {

class CrossNodeRun {
 public:
  // `wake` is called (from a worker) when local work the workers ran
  // finishes, so that the engine looks again at once.
  CrossNodeRun(std::vector<CrossNodeStage> stages, NodeTransport& transport, ThreadPool& pool,
               std::function<void()> wake);
  // A run that ends unfinished (the job failed) abandons its transfers to
  // the transport: they are not waited for.
  ~CrossNodeRun();
  CrossNodeRun(const CrossNodeRun&) = delete;
  CrossNodeRun& operator=(const CrossNodeRun&) = delete;

  // Does what can be done now; true once every stage finished or a
  // transfer failed (status() says which).
  bool Advance();
  const absl::Status& status() const { return status_; }
  // Whether it waits only on transfers (the engine then polls soon).
  bool waiting_for_transfers() const { return !in_flight_.empty(); }

  Clock::time_point started() const { return started_; }
  Clock::time_point transfers_started() const { return transfers_started_; }
  uint64_t bytes() const { return bytes_; }

 private:
  struct Transfer {
    size_t stage = 0;
    std::vector<Pending> pending;
  };

  // Starts the transfers of `stage` (its local work is done).
  absl::Status StartTransfers(size_t stage);
  // Completes what finished; an error when a transfer failed.
  absl::Status TestTransfers();

  std::vector<CrossNodeStage> stages_;
  NodeTransport& transport_;
  ThreadPool& pool_;
  std::function<void()> wake_;
  size_t next_local_ = 0;  // the next stage whose local work starts
  bool local_running_ = false;
  std::atomic<bool> local_done_{false};
  std::deque<Transfer> in_flight_;
  size_t finished_ = 0;
  absl::Status status_;
  Clock::time_point started_;
  Clock::time_point transfers_started_{};
  uint64_t bytes_ = 0;
};

}  // namespace collective::daemon::exec
