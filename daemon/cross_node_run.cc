#include "daemon/cross_node_run.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/world.h"

namespace collective::daemon {
namespace {

// Stages whose transfers may be in flight at once: enough to keep the
// network busy while the next chunk is reduced, few enough to bound what an
// abandoned run leaves with MPI.
constexpr size_t kMaxInFlight = 4;

void FreeTypes(InFlightMpi& mpi) {
  for (MPI_Datatype& type : mpi.types) MPI_Type_free(&type);
  mpi.types.clear();
}

}  // namespace

CrossNodeRun::CrossNodeRun(std::vector<CrossNodeStage> stages, ThreadPool& pool,
                           std::function<void()> wake)
    : stages_(std::move(stages)), pool_(pool), wake_(std::move(wake)), started_(Clock::now()) {
  for (const CrossNodeStage& stage : stages_) bytes_ += stage.bytes;
}

CrossNodeRun::~CrossNodeRun() {
  // Local work reads and writes memory the engine may free next: finish it.
  while (pool_.Busy()) pool_.Run(0, [](size_t) {});
  for (Transfer& transfer : in_flight_) {
    for (MPI_Request& request : transfer.mpi.requests) {
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    }
    // The types stay: freeing them under a transfer MPI may still progress
    // is allowed, but an abandoned run belongs to a broken world anyway.
  }
}

absl::Status CrossNodeRun::StartTransfers(size_t stage) {
  Transfer& transfer = in_flight_.emplace_back();
  transfer.stage = stage;
  if (transfers_started_ == Clock::time_point{}) transfers_started_ = Clock::now();
  log::Mpi().trace("stage {} of '{}': {} transfers start", stage, stages_[stage].tensor,
                   stages_[stage].transfers.size());
  for (const TransferStart& start : stages_[stage].transfers) {
    if (absl::Status started = start(transfer.mpi); !started.ok()) {
      return absl::Status(started.code(), absl::StrCat("'", stages_[stage].tensor,
                                                       "' across nodes: ", started.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CrossNodeRun::TestTransfers() {
  while (!in_flight_.empty()) {
    Transfer& transfer = in_flight_.front();
    int done = 1;
    if (!transfer.mpi.requests.empty()) {
      const int error = MPI_Testall(static_cast<int>(transfer.mpi.requests.size()),
                                    transfer.mpi.requests.data(), &done, MPI_STATUSES_IGNORE);
      if (absl::Status tested = MpiStatus(error, "MPI_Testall"); !tested.ok()) {
        return absl::Status(tested.code(), absl::StrCat("'", stages_[transfer.stage].tensor,
                                                        "' across nodes: ", tested.message()));
      }
    }
    if (!done) return absl::OkStatus();
    FreeTypes(transfer.mpi);
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

}  // namespace collective::daemon
