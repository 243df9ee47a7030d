// Engine: running what is ready — agreement across ranks, the control
// collectives (barrier, join, process-set changes), and the data collectives
// fused into batches for the executor, with their timeline records.
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/ready_check.h"

namespace collective::daemon::engine {

uint64_t Engine::Nanos(Clock::time_point time) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count());
}

std::string Engine::TimelineName(const negotiation::ReadyTensor& tensor) {
  return tensor.process_set_id == 0
             ? tensor.name
             : absl::StrCat(tensor.name, " (process set ", tensor.process_set_id, ")");
}

bool Engine::RunReady() {
  if (coordinator_ == nullptr) return false;
  std::vector<negotiation::ReadyTensor> ready = coordinator_->TakeReady();
  // Matched messages run among this node's ranks only (OnMessage refuses
  // the others): nothing to announce to node 0.
  std::vector<negotiation::ReadyTensor> messages = messages_->TakeMatched();
  const size_t collectives = ready.size();
  ready.insert(ready.end(), std::make_move_iterator(messages.begin()),
               std::make_move_iterator(messages.end()));
  bool ran = !ready.empty();
  std::vector<negotiation::ReadyTensor> data;
  for (size_t i = 0; i < ready.size(); ++i) {
    negotiation::ReadyTensor& tensor = ready[i];
    if (i < collectives && across_.Announce(tensor)) {
      KeepPollingFast();
      continue;
    }
    RecordNegotiation(tensor);
    if (absl::Status status = CheckReady(tensor, CheckScope::kThisNode); !status.ok()) {
      const log::ScopedContext about({.tensor = tensor.name});
      log::Coord().warn("{}", status.message());
      FailTensor(tensor, status);
    } else if (!negotiation::CarriesData(tensor.request().collective())) {
      RunControl(tensor);
    } else {
      data.push_back(std::move(tensor));
    }
  }
  for (exec::FusedBatch& batch : exec::PlanFusion(std::move(data), knobs_.fusion_threshold_bytes)) {
    deferred_.push_back(std::move(batch));
  }
  return RunDeferred() || ran;
}

bool Engine::RunDeferred() {
  bool ran = false;
  while (!deferred_.empty() && job_ != nullptr && job_->state() == job::JobState::kRunning) {
    if (deferred_.front().tensors.front().request().memory() == v1::MEMORY_KIND_CUDA) {
      if (!RunDeviceBatch()) return ran;  // a release will make room
      ran = true;
      continue;
    }
    exec::Executor::Outcome outcome = executor_.Run(deferred_.front(), *job_->results());
    if (outcome.deferred) {
      log::Exec().debug("'{}' waits for result space ({} of {} bytes in use)",
                        deferred_.front().tensors.front().name, job_->results()->bytes_in_use(),
                        job_->results()->capacity());
      return ran;  // a release will make room
    }
    ran = true;
    const exec::FusedBatch batch = std::move(deferred_.front());
    deferred_.pop_front();
    BatchRun run{.where = BatchRun::Where::kHost, .outcome = std::move(outcome)};
    run.breaks_job = !run.outcome.corrupted.empty() || run.outcome.results_lost;
    CompleteBatch(batch, run);
  }
  return ran;
}

void Engine::RunControl(const negotiation::ReadyTensor& tensor) {
  const v1::TensorRequest& request = tensor.request();
  const v1::Collective collective = request.collective();
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
      const job::ProcessSet& added = *job_->process_sets().Find(*id);
      // Across nodes, every node runs this decision at the same point of
      // the order: the set's nodes create its communicator together.
      if (absl::Status made = across_.AddSet(added); !made.ok()) {
        FailTensor(tensor, made);
        FailJob(absl::UnavailableError(absl::StrCat("process set ", *id, " of job '", job_->id(),
                                                    "' across nodes: ", made.message())));
        return;
      }
      log::Coord().info("job '{}': process set {} {} added", job_->id(), *id,
                        job::RanksString(added.ranks));
      CompleteControl(tensor, *id);
      return;
    }
    case v1::COLLECTIVE_REMOVE_PROCESS_SET: {
      const int32_t id = request.target_process_set_id();
      if (absl::Status removed = job_->process_sets().Remove(id); !removed.ok()) {
        FailTensor(tensor, removed);
        return;
      }
      const absl::Status removed_why =
          absl::CancelledError(absl::StrCat("process set ", id, " was removed"));
      FailSubmissions(coordinator_->TakePending(id), removed_why);
      FailMessages(messages_->TakeSet(id), removed_why);
      if (remote_messages_ != nullptr) {
        std::vector<uint64_t> announced;
        FailMessages(remote_messages_->TakeSet(id, &announced), removed_why);
        // The sender's node may have matched one of these receives first:
        // its bytes then still come, on this set's communicator, which must
        // stay open to take them (the set's id may name another set soon).
        for (const uint64_t receive : announced) {
          retired_receive_spans_[receive] = across_.SpanOf(id);
        }
      }
      across_.RemoveSet(id);
      log::Coord().info("job '{}': process set {} removed", job_->id(), id);
      CompleteControl(tensor, id);
      return;
    }
    default:
      FailTensor(tensor,
                 absl::InternalError(absl::StrCat("no way to run ", CollectiveName(collective))));
  }
}

void Engine::CompleteControl(const negotiation::ReadyTensor& tensor, int64_t value) {
  metrics_.ControlCompleted(tensor);
  totals_.set_collectives(totals_.collectives() + 1);
  for (const negotiation::Submission& submission : tensor.submissions) {
    job::ClientRecord& client = *submission.client;
    client.outstanding.erase(submission.request.request_id());
    totals_.set_requests(totals_.requests() + 1);
    if (client.gone) continue;
    shm::CompletionRecord record{};
    record.request_id = submission.request.request_id();
    record.result_dim0 = value;
    client.ring->Publish(record);
  }
}

void Engine::FailTensor(const negotiation::ReadyTensor& tensor, const absl::Status& status) {
  for (const negotiation::Submission& submission : tensor.submissions) {
    CompleteWithError(*submission.client, submission.request.request_id(), status);
  }
}

void Engine::CompleteBatch(const exec::FusedBatch& batch, const BatchRun& run) {
  const exec::Executor::Outcome& outcome = run.outcome;
  if (!outcome.status.ok()) {
    for (const negotiation::ReadyTensor& tensor : batch.tensors) FailTensor(tensor, outcome.status);
    if (run.breaks_job) FailJob(outcome.status);
    return;
  }
  const bool device = run.where == BatchRun::Where::kDevice;
  const bool across = run.where == BatchRun::Where::kAcrossNodes;
  totals_.set_fused_batches(totals_.fused_batches() + 1);
  if (across) {
    totals_.set_cross_node_collectives(totals_.cross_node_collectives() + batch.tensors.size());
    totals_.set_cross_node_bytes(totals_.cross_node_bytes() + run.transferred);
  }
  metrics_.BatchCompleted(batch, outcome);
  std::vector<std::pair<std::string, uint64_t>>* rows =
      device && timeline_.active() ? &gpu_rows_[run.device_batch] : nullptr;
  uint64_t splits_at = run.splits_block;
  uint64_t batch_bytes = 0;
  for (size_t t = 0; t < batch.tensors.size(); ++t) {
    const negotiation::ReadyTensor& tensor = batch.tensors[t];
    const exec::ops::CollectiveOp& op = *exec::ops::OpFor(tensor.request().collective());
    uint64_t bytes = 0;
    for (const negotiation::Submission& submission : tensor.submissions)
      bytes += submission.request.length();
    totals_.set_collectives(totals_.collectives() + 1);
    totals_.set_bytes_reduced(totals_.bytes_reduced() + bytes);
    batch_bytes += bytes;
    const std::string name = timeline_.active() ? TimelineName(tensor) : std::string();
    if (timeline_.active()) {
      timeline_.Phase(name, exec::kPhaseQueue, Nanos(tensor.ready_at), Nanos(outcome.started), 0);
      if (device) {
        rows->emplace_back(name, bytes);  // kPhaseGpu when the GPU is done: OnGpuDone
      } else {
        timeline_.Phase(name, op.phase(), Nanos(outcome.started), Nanos(outcome.finished), bytes);
      }
      if (across) {
        timeline_.Phase(name, exec::kPhaseCrossNode, Nanos(outcome.finished),
                        Nanos(run.transferred_at), run.transferred);
      }
    }
    if (device) {
      CompleteOnDevice(tensor, name, run.splits_block, splits_at);
      continue;
    }
    for (size_t i = 0; i < tensor.submissions.size(); ++i) {
      const negotiation::Submission& submission = tensor.submissions[i];
      Complete(*submission.client, submission.request, outcome.block, outcome.slots[t],
               op.ResultOf(tensor, i), name);
    }
  }
  MeasureForTuning(batch, batch_bytes);
}

void Engine::RecordNegotiation(const negotiation::ReadyTensor& tensor) {
  if (!timeline_.active() || tensor.submissions.empty()) return;
  std::vector<observe::RankArrival> arrivals;
  for (const negotiation::Submission& submission : tensor.submissions) {
    arrivals.push_back({submission.set_rank, Nanos(submission.at)});
  }
  timeline_.Negotiation(TimelineName(tensor), tensor.request().collective(), Nanos(tensor.first_at),
                        Nanos(tensor.ready_at), arrivals);
}

}  // namespace collective::daemon::engine
