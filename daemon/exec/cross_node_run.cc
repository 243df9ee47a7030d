#include "daemon/exec/cross_node_run.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon::exec {
namespace {

// Stages whose transfers may be in flight at once: enough to keep the
// network busy while the next chunk is reduced, few enough to bound what an
// abandoned run leaves with the transport.
constexpr size_t kMaxInFlight = 4;

}  // namespace

CrossNodeRun::CrossNodeRun(std::vector<CrossNodeStage> stages, NodeTransport& transport,
                           ThreadPool& pool, std::function<void()> wake)
    : stages_(std::move(stages)),
      transport_(transport),
      pool_(pool),
      wake_(std::move(wake)),
      started_(Clock::now()) {
  for (const CrossNodeStage& stage : stages_) bytes_ += stage.bytes;
}

CrossNodeRun::~CrossNodeRun() {
  // Local work reads and writes memory the engine may free next: finish it.
  while (pool_.Busy()) pool_.Run(0, [](size_t) {});
  // in_flight_'s transfers are abandoned as they go.
}

absl::Status CrossNodeRun::StartTransfers(size_t stage) {
  Transfer& transfer = in_flight_.emplace_back();
  transfer.stage = stage;
  if (transfers_started_ == Clock::time_point{}) transfers_started_ = Clock::now();
  log::Mpi().trace("stage {} of '{}': {} transfers start", stage, stages_[stage].tensor,
                   stages_[stage].transfers.size());
  for (const TransferStart& start : stages_[stage].transfers) {
    absl::StatusOr<Pending> started = start(transport_);
    if (!started.ok()) {
      return absl::Status(
          started.status().code(),
          absl::StrCat("'", stages_[stage].tensor, "' across nodes: ", started.status().message()));
    }
    transfer.pending.push_back(std::move(*started));
  }
  return absl::OkStatus();
}

absl::Status CrossNodeRun::TestTransfers() {
  while (!in_flight_.empty()) {
    Transfer& transfer = in_flight_.front();
    for (Pending& pending : transfer.pending) {
      absl::StatusOr<bool> done = pending->Test();
      if (!done.ok()) {
        return absl::Status(done.status().code(),
                            absl::StrCat("'", stages_[transfer.stage].tensor,
                                         "' across nodes: ", done.status().message()));
      }
      if (!*done) return absl::OkStatus();
    }
    log::Mpi().trace("stage {} of '{}' transferred", transfer.stage,
                     stages_[transfer.stage].tensor);
    // A scale of one chunk: small enough to run here.
    const ops::WorkList& after = stages_[transfer.stage].after;
    for (size_t i = 0; i < after.size(); ++i) after.Run(i);
    in_flight_.pop_front();
    ++finished_;
  }
  return absl::OkStatus();
}

bool CrossNodeRun::Advance() {
  if (!status_.ok()) return true;
  while (true) {
    if (absl::Status tested = TestTransfers(); !tested.ok()) {
      status_ = tested;
      return true;
    }
    if (local_running_) {
      if (!local_done_.load(std::memory_order_acquire)) return false;
      local_running_ = false;
      if (absl::Status started = StartTransfers(next_local_ - 1); !started.ok()) {
        status_ = started;
        return true;
      }
      continue;
    }
    if (next_local_ < stages_.size() && in_flight_.size() < kMaxInFlight) {
      const ops::WorkList& before = stages_[next_local_].before;
      ++next_local_;
      local_running_ = true;
      local_done_.store(false, std::memory_order_relaxed);
      if (before.bytes() < ThreadPool::kInlineBytes) {
        // A small batch's latency is mostly the hand-offs: a worker's
        // wake-up, then the engine's.
        for (size_t i = 0; i < before.size(); ++i) before.Run(i);
        local_done_.store(true, std::memory_order_relaxed);
        continue;
      }
      pool_.Start(
          before.size(), [&before](size_t i) { before.Run(i); },
          [this] {
            local_done_.store(true, std::memory_order_release);
            wake_();
          });
      continue;
    }
    return finished_ == stages_.size();
  }
}

}  // namespace collective::daemon::exec
