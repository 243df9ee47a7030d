// Where every piece of a job's work ends: a request's completion record (or
// its error, with its text), a control collective's answer, a batch's
// results whatever ran it (the host, the host and other nodes, the GPU),
// and the release of results the ranks have read. Completion keeps the
// job's and the daemon's totals, the metrics and the timeline rows of each.
// One per job run; engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "collective/v1/status.pb.h"
#include "daemon/exec/executor.h"
#include "daemon/exec/fusion.h"
#include "daemon/exec/ops/collective_op.h"
#include "daemon/gpu/gpu_executor.h"
#include "daemon/job/client_record.h"
#include "daemon/job/result_arena.h"
#include "daemon/negotiation/coordinator.h"
#include "daemon/observe/metrics.h"
#include "daemon/observe/timeline.h"

namespace collective::daemon::engine {

// No result block: the result is in the rank's own output (or on its GPU).
inline constexpr uint64_t kNoBlock = ~uint64_t{0};

// How a batch of data collectives ran, whatever ran it.
struct BatchRun {
  enum class Where { kHost, kAcrossNodes, kDevice };
  Where where = Where::kHost;
  // OK or the error every rank of every tensor receives; on the host and
  // across nodes the result block and slots; when the work ran (on the
  // GPU: when it was queued).
  exec::Executor::Outcome outcome;
  // The failure leaves the job unable to go on.
  bool breaks_job = false;
  // Across nodes: the bytes this node sent and received, and when the
  // transfers ended (outcome.finished is when they started).
  uint64_t transferred = 0;
  Clock::time_point transferred_at{};
  // On the GPU: the batch's id (its timeline rows end with it), and the
  // block of alltoall's received splits (kNoBlock if none).
  uint64_t device_batch = 0;
  uint64_t splits_block = kNoBlock;
};

class Completion {
 public:
  struct Parts {
    observe::JobTimelines& timeline;  // the daemon's and the job's own
    observe::Metrics& metrics;
    v1::Totals& daemon_totals;
    gpu::GpuExecutor& gpu;
  };
  struct Hooks {
    // A batch's failure broke the job.
    std::function<void(const absl::Status&)> break_job;
    // A batch completed, having reduced `bytes` (autotuning measures it).
    std::function<void(const exec::FusedBatch&, uint64_t bytes)> measured;
  };
  Completion(Parts parts, Hooks hooks) : parts_(parts), hooks_(std::move(hooks)) {}

  // The job's result segment, once it formed (results are released there).
  void set_results(job::ResultArena* results) { results_ = results; }

  // A finished request: its record, and the result it holds until released
  // (none when `block` is kNoBlock).
  void Complete(job::ClientRecord& client, const v1::TensorRequest& request, uint64_t block,
                uint64_t slot, const exec::ops::RankResult& result, const std::string& tensor,
                uint32_t flags = 0);
  void CompleteWithError(job::ClientRecord& client, uint64_t request_id,
                         const absl::Status& status);
  // Barrier, join, process-set changes: every rank's record carries `value`.
  void CompleteControl(const negotiation::ReadyTensor& tensor, int64_t value);
  // The one way a batch completes: every rank's record or error, the
  // totals, the metrics and the timeline.
  void CompleteBatch(const exec::FusedBatch& batch, const BatchRun& run);

  void FailTensor(const negotiation::ReadyTensor& tensor, const absl::Status& why);
  void FailReady(std::vector<negotiation::ReadyTensor> tensors, const absl::Status& why);
  void FailSubmissions(std::vector<negotiation::PendingTensor> tensors, const absl::Status& why);
  void FailHalves(std::vector<negotiation::Submission> halves, const absl::Status& why);
  // What a set refuses once a rank of it joined, each with its own error.
  void FailRefused(std::vector<std::pair<negotiation::PendingTensor, absl::Status>> refused);

  void ReleaseResult(job::ClientRecord& client, uint64_t request_id);
  void ReleaseAllResults(job::ClientRecord& client);

  // The negotiation of a tensor, from its first submission here to ready.
  void RecordNegotiation(const negotiation::ReadyTensor& tensor);
  // A batch on the GPU is done: its timeline rows end.
  void DeviceDone(uint64_t device_batch, Clock::time_point started);

  // This job's own totals (the daemon's add up every job's).
  const v1::Totals& totals() const { return totals_; }

  // The row a tensor gets in the timeline: names are per process set.
  static std::string TimelineName(const negotiation::ReadyTensor& tensor);

 private:
  // The records of a CUDA tensor's ranks (each result is in the rank's
  // output; alltoall's received splits are written at `splits_at`, in
  // `block`, which advances).
  void CompleteOnDevice(const negotiation::ReadyTensor& tensor, const std::string& name,
                        uint64_t block, uint64_t& splits_at);
  // Adds to the job's and the daemon's totals alike.
  template <typename Add>
  void Count(Add add) {
    add(totals_);
    add(parts_.daemon_totals);
  }

  Parts parts_;
  Hooks hooks_;
  job::ResultArena* results_ = nullptr;
  v1::Totals totals_;
  // While a timeline records: batches of CUDA tensors on the GPU, by batch
  // id, with their rows and bytes.
  absl::flat_hash_map<uint64_t, std::vector<std::pair<std::string, uint64_t>>> device_rows_;
};

}  // namespace collective::daemon::engine
