// Engine: running what is ready — agreement across ranks, the control
// collectives (barrier, join, process-set changes), and the data collectives
// fused into batches for the executor, with their timeline records.
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "daemon/engine.h"
#include "daemon/mismatch.h"

namespace collective::daemon {

uint64_t Engine::Nanos(Clock::time_point time) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count());
}

std::string Engine::TimelineName(const ReadyTensor& tensor) {
  return tensor.process_set_id == 0
             ? tensor.name
             : absl::StrCat(tensor.name, " (process set ", tensor.process_set_id, ")");
}

bool Engine::RunReady() {
  if (coordinator_ == nullptr) return false;
  std::vector<ReadyTensor> ready = coordinator_->TakeReady();
  bool ran = !ready.empty();
  std::vector<ReadyTensor> data;
  for (ReadyTensor& tensor : ready) {
    if (AnnounceIfAcrossNodes(tensor)) continue;
    if (timeline_.active()) {
      std::vector<RankArrival> arrivals;
      for (const Submission& submission : tensor.submissions) {
        arrivals.push_back({submission.set_rank, Nanos(submission.at)});
      }
      timeline_.Negotiation(TimelineName(tensor), tensor.request().collective(),
                            Nanos(tensor.first_at), Nanos(tensor.ready_at), arrivals);
    }
    const ops::CollectiveOp* op = ops::OpFor(tensor.request().collective());
    absl::Status status = CheckAgreement(tensor);
    if (status.ok() && op != nullptr) status = op->Check(tensor);
    if (status.ok() && op != nullptr && tensor.request().memory() == v1::MEMORY_KIND_CUDA) {
      status = gpu::GpuExecutor::Check(tensor);
    }
    if (!status.ok()) {
      const log::ScopedContext about({.tensor = tensor.name});
      log::Coord().warn("{}", status.message());
      FailTensor(tensor, status);
    } else if (op == nullptr) {
      RunControl(tensor);
    } else {
      data.push_back(std::move(tensor));
    }
  }
  for (FusedBatch& batch : PlanFusion(std::move(data), config_.fusion_threshold_bytes)) {
    deferred_.push_back(std::move(batch));
  }
  return RunDeferred() || ran;
}

bool Engine::RunDeferred() {
  bool ran = false;
  while (!deferred_.empty() && job_ != nullptr && job_->state() == JobState::kRunning) {
    if (deferred_.front().tensors.front().request().memory() == v1::MEMORY_KIND_CUDA) {
      if (!RunDeviceBatch()) return ran;  // a release will make room
      ran = true;
      continue;
    }
    Executor::Outcome outcome = executor_.Run(deferred_.front(), *job_->results());
    if (outcome.deferred) {
      log::Exec().debug("'{}' waits for result space ({} of {} bytes in use)",
                        deferred_.front().tensors.front().name, job_->results()->bytes_in_use(),
                        job_->results()->capacity());
      return ran;  // a release will make room
    }
    ran = true;
    const FusedBatch batch = std::move(deferred_.front());
    deferred_.pop_front();
    if (outcome.status.ok() && timeline_.active()) RecordTimeline(batch, outcome);
    CompleteBatch(batch, outcome);
    if (!outcome.corrupted.empty() || outcome.results_lost) FailJob(outcome.status);
  }
  return ran;
}

void Engine::RunControl(const ReadyTensor& tensor) {
  const v1::TensorRequest& request = tensor.request();
  const v1::Collective collective = request.collective();
  if (tensor.has_joined_ranks()) {
    // Only allreduce carries on while ranks have joined (Horovod).
    FailTensor(tensor, absl::FailedPreconditionError(absl::StrCat(
                           CollectiveName(collective), " of process set ", tensor.process_set_id,
                           " cannot run while ranks have joined; after a join only allreduce "
                           "carries on")));
    return;
  }
  switch (collective) {
    case v1::COLLECTIVE_BARRIER:
      CompleteControl(tensor, 0);
      return;
    case v1::COLLECTIVE_JOIN:
      coordinator_->EndJoin(tensor.process_set_id);
      CompleteControl(tensor, tensor.completed_by);
      return;
    case v1::COLLECTIVE_ADD_PROCESS_SET: {
      const auto& ranks = request.process_set_ranks();
      const auto id = job_->process_sets().Add(
          std::span<const int32_t>(ranks.data(), static_cast<size_t>(ranks.size())));
      if (!id.ok()) {
        FailTensor(tensor, id.status());
        return;
      }
      const ProcessSet& added = *job_->process_sets().Find(*id);
      if (set_comms_ != nullptr) {
        // Every node runs this decision at the same point of the order: the
        // set's nodes create its communicator together.
        if (absl::Status made = set_comms_->Add(added); !made.ok()) {
          FailTensor(tensor, made);
          FailJob(absl::UnavailableError(absl::StrCat("process set ", *id, " of job '", job_->id(),
                                                      "' across nodes: ", made.message())));
          return;
        }
      }
      log::Coord().info("job '{}': process set {} {} added", job_->id(), *id,
                        RanksString(added.ranks));
      CompleteControl(tensor, *id);
      return;
    }
    case v1::COLLECTIVE_REMOVE_PROCESS_SET: {
      const int32_t id = request.target_process_set_id();
      if (absl::Status removed = job_->process_sets().Remove(id); !removed.ok()) {
        FailTensor(tensor, removed);
        return;
      }
      FailSubmissions(coordinator_->TakePending(id),
                      absl::CancelledError(absl::StrCat("process set ", id, " was removed")));
      if (set_comms_ != nullptr) set_comms_->Remove(id);
      log::Coord().info("job '{}': process set {} removed", job_->id(), id);
      CompleteControl(tensor, id);
      return;
    }
    default:
      FailTensor(tensor,
                 absl::InternalError(absl::StrCat("no way to run ", CollectiveName(collective))));
  }
}

void Engine::CompleteControl(const ReadyTensor& tensor, int64_t value) {
  metrics_.ControlCompleted(tensor);
  totals_.set_collectives(totals_.collectives() + 1);
  for (const Submission& submission : tensor.submissions) {
    ClientRecord& client = *submission.client;
    client.outstanding.erase(submission.request.request_id());
    totals_.set_requests(totals_.requests() + 1);
    if (client.gone) continue;
    shm::CompletionRecord record{};
    record.request_id = submission.request.request_id();
    record.result_dim0 = value;
    client.ring->Publish(record);
  }
}

void Engine::FailTensor(const ReadyTensor& tensor, const absl::Status& status) {
  for (const Submission& submission : tensor.submissions) {
    CompleteWithError(*submission.client, submission.request.request_id(), status);
  }
}

void Engine::CompleteBatch(const FusedBatch& batch, const Executor::Outcome& outcome) {
  if (!outcome.status.ok()) {
    for (const ReadyTensor& tensor : batch.tensors) FailTensor(tensor, outcome.status);
    return;
  }
  totals_.set_fused_batches(totals_.fused_batches() + 1);
  metrics_.BatchCompleted(batch, outcome);
  for (size_t t = 0; t < batch.tensors.size(); ++t) {
    const ReadyTensor& tensor = batch.tensors[t];
    const ops::CollectiveOp& op = *ops::OpFor(tensor.request().collective());
    totals_.set_collectives(totals_.collectives() + 1);
    uint64_t bytes = 0;
    for (const Submission& submission : tensor.submissions) bytes += submission.request.length();
    totals_.set_bytes_reduced(totals_.bytes_reduced() + bytes);
    const std::string name = timeline_.active() ? TimelineName(tensor) : std::string();
    for (size_t i = 0; i < tensor.submissions.size(); ++i) {
      const Submission& submission = tensor.submissions[i];
      Complete(*submission.client, submission.request, outcome.block, outcome.slots[t],
               op.ResultOf(tensor, i), name);
    }
  }
}

void Engine::RecordTimeline(const FusedBatch& batch, const Executor::Outcome& outcome) {
  for (const ReadyTensor& tensor : batch.tensors) {
    const std::string name = TimelineName(tensor);
    const ops::CollectiveOp& op = *ops::OpFor(tensor.request().collective());
    uint64_t bytes = 0;
    for (const Submission& submission : tensor.submissions) bytes += submission.request.length();
    timeline_.Phase(name, kPhaseQueue, Nanos(tensor.ready_at), Nanos(outcome.started), 0);
    timeline_.Phase(name, op.phase(), Nanos(outcome.started), Nanos(outcome.finished), bytes);
  }
}

}  // namespace collective::daemon
