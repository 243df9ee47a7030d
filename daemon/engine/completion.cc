#include "daemon/engine/completion.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "daemon/exec/ops/ops.h"
#include "shm/segment_layout.h"

namespace collective::daemon::engine {
namespace {

// Alltoall's received splits, one array per rank, in the result segment.
uint64_t SplitsBytes(const negotiation::ReadyTensor& tensor) {
  return shm::RoundUp(sizeof(int64_t) * static_cast<uint64_t>(tensor.set_size),
                      shm::kDataAlignment);
}

}  // namespace

std::string Completion::TimelineName(const negotiation::ReadyTensor& tensor) {
  return tensor.process_set_id == 0
             ? tensor.name
             : absl::StrCat(tensor.name, " (process set ", tensor.process_set_id, ")");
}

void Completion::Complete(job::ClientRecord& client, const v1::TensorRequest& request,
                          uint64_t block, uint64_t slot, const exec::ops::RankResult& result,
                          const std::string& tensor, uint32_t flags) {
  client.outstanding.erase(request.request_id());
  if (parts_.gpu.has_admitted()) parts_.gpu.Finish(client.id, request.request_id());
  Count([](v1::Totals& t) { t.set_requests(t.requests() + 1); });
  if (result.in_output) flags |= shm::kRecordResultInOutput;
  // A result already in the client's own output leaves nothing to read here.
  if (client.gone || (flags & shm::kRecordResultInOutput) != 0) {
    if (block != kNoBlock) results_->Release(block);
    if (client.gone) return;
  } else if (block != kNoBlock) {
    // A CUDA tensor's result is in device memory; only its splits are here.
    const uint64_t held =
        (flags & shm::kRecordDeviceResult) != 0 ? sizeof(int64_t) * result.aux_count : result.bytes;
    client.held_results[request.request_id()] = {block, held,
                                                 parts_.timeline.active() ? tensor : std::string()};
    client.result_bytes_held += held;
  }
  shm::CompletionRecord record{};
  record.request_id = request.request_id();
  record.flags = flags;
  record.result_offset = slot + result.offset;
  record.result_bytes = result.bytes;
  record.result_dim0 = result.dim0;
  if (result.aux_count > 0) {
    record.aux_offset = slot + result.aux_offset;
    record.aux_count = result.aux_count;
  }
  client.ring->Publish(record);
}

void Completion::CompleteWithError(job::ClientRecord& client, uint64_t request_id,
                                   const absl::Status& status) {
  client.outstanding.erase(request_id);
  if (parts_.gpu.has_admitted()) parts_.gpu.Finish(client.id, request_id);
  Count([](v1::Totals& t) { t.set_errors(t.errors() + 1); });
  parts_.metrics.RequestFailed(status);
  if (client.gone) return;
  shm::CompletionRecord record{};
  record.request_id = request_id;
  record.status_code = static_cast<int32_t>(status.code());
  client.ring->Publish(record, status.message());
}

void Completion::CompleteControl(const negotiation::ReadyTensor& tensor, int64_t value) {
  parts_.metrics.ControlCompleted(tensor);
  Count([](v1::Totals& t) { t.set_collectives(t.collectives() + 1); });
  for (const negotiation::Submission& submission : tensor.submissions) {
    job::ClientRecord& client = *submission.client;
    client.outstanding.erase(submission.request.request_id());
    Count([](v1::Totals& t) { t.set_requests(t.requests() + 1); });
    if (client.gone) continue;
    shm::CompletionRecord record{};
    record.request_id = submission.request.request_id();
    record.result_dim0 = value;
    client.ring->Publish(record);
  }
}

void Completion::FailTensor(const negotiation::ReadyTensor& tensor, const absl::Status& why) {
  for (const negotiation::Submission& submission : tensor.submissions) {
    CompleteWithError(*submission.client, submission.request.request_id(), why);
  }
}

void Completion::FailReady(std::vector<negotiation::ReadyTensor> tensors, const absl::Status& why) {
  for (const negotiation::ReadyTensor& tensor : tensors) FailTensor(tensor, why);
}

void Completion::FailSubmissions(std::vector<negotiation::PendingTensor> tensors,
                                 const absl::Status& why) {
  for (negotiation::PendingTensor& tensor : tensors) {
    for (auto& submission : tensor.by_rank) {
      if (submission.has_value()) {
        CompleteWithError(*submission->client, submission->request.request_id(), why);
      }
    }
  }
}

void Completion::FailHalves(std::vector<negotiation::Submission> halves, const absl::Status& why) {
  for (const negotiation::Submission& half : halves) {
    CompleteWithError(*half.client, half.request.request_id(), why);
  }
}

void Completion::FailRefused(
    std::vector<std::pair<negotiation::PendingTensor, absl::Status>> refused) {
  for (auto& [tensor, why] : refused) {
    const log::ScopedContext about({.tensor = tensor.name});
    log::Coord().warn("{}", why.message());
    std::vector<negotiation::PendingTensor> one;
    one.push_back(std::move(tensor));
    FailSubmissions(std::move(one), why);
  }
}

void Completion::CompleteBatch(const exec::FusedBatch& batch, const BatchRun& run) {
  const exec::Executor::Outcome& outcome = run.outcome;
  if (!outcome.status.ok()) {
    for (const negotiation::ReadyTensor& tensor : batch.tensors) FailTensor(tensor, outcome.status);
    if (run.breaks_job && hooks_.break_job) hooks_.break_job(outcome.status);
    return;
  }
  observe::JobTimelines& timeline = parts_.timeline;
  const bool device = run.where == BatchRun::Where::kDevice;
  const bool across = run.where == BatchRun::Where::kAcrossNodes;
  Count([](v1::Totals& t) { t.set_fused_batches(t.fused_batches() + 1); });
  if (across) {
    Count([&](v1::Totals& t) {
      t.set_cross_node_collectives(t.cross_node_collectives() + batch.tensors.size());
      t.set_cross_node_bytes(t.cross_node_bytes() + run.transferred);
    });
  }
  parts_.metrics.BatchCompleted(batch, outcome);
  std::vector<std::pair<std::string, uint64_t>>* rows =
      device && timeline.active() ? &device_rows_[run.device_batch] : nullptr;
  uint64_t splits_at = run.splits_block;
  uint64_t batch_bytes = 0;
  for (size_t t = 0; t < batch.tensors.size(); ++t) {
    const negotiation::ReadyTensor& tensor = batch.tensors[t];
    const exec::ops::CollectiveOp& op = *exec::ops::OpFor(tensor.request());
    uint64_t bytes = 0;
    for (const negotiation::Submission& submission : tensor.submissions)
      bytes += submission.request.length();
    Count([&](v1::Totals& totals) {
      totals.set_collectives(totals.collectives() + 1);
      totals.set_bytes_reduced(totals.bytes_reduced() + bytes);
    });
    batch_bytes += bytes;
    const std::string name = timeline.active() ? TimelineName(tensor) : std::string();
    if (timeline.active()) {
      timeline.Phase(name, exec::kPhaseQueue, MonotonicNanos(tensor.ready_at),
                     MonotonicNanos(outcome.started), 0);
      if (device) {
        rows->emplace_back(name, bytes);  // kPhaseGpu when the GPU is done: DeviceDone
      } else {
        timeline.Phase(name, op.phase(), MonotonicNanos(outcome.started),
                       MonotonicNanos(outcome.finished), bytes);
      }
      if (across) {
        timeline.Phase(name, exec::kPhaseCrossNode, MonotonicNanos(outcome.finished),
                       MonotonicNanos(run.transferred_at), run.transferred);
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
  if (hooks_.measured) hooks_.measured(batch, batch_bytes);
}

void Completion::CompleteOnDevice(const negotiation::ReadyTensor& tensor, const std::string& name,
                                  uint64_t block, uint64_t& splits_at) {
  const exec::ops::CollectiveOp& op = *exec::ops::OpFor(tensor.request());
  const bool alltoall = tensor.request().collective() == v1::COLLECTIVE_ALLTOALL;
  const std::vector<std::vector<int64_t>> splits =
      alltoall ? exec::ops::AlltoallSplits(tensor) : std::vector<std::vector<int64_t>>();
  for (size_t i = 0; i < tensor.submissions.size(); ++i) {
    const negotiation::Submission& submission = tensor.submissions[i];
    exec::ops::RankResult result = op.ResultOf(tensor, i);
    result.offset = 0;
    if (!alltoall) {
      Complete(*submission.client, submission.request, kNoBlock, 0, result, name,
               shm::kRecordDeviceResult);
      continue;
    }
    // The rows this rank received from each rank.
    auto* received = reinterpret_cast<int64_t*>(results_->data() + splits_at);
    for (size_t sender = 0; sender < splits.size(); ++sender) {
      received[sender] = splits[sender][static_cast<size_t>(submission.set_rank)];
    }
    result.aux_offset = 0;
    Complete(*submission.client, submission.request, block, splits_at, result, name,
             shm::kRecordDeviceResult);
    splits_at += SplitsBytes(tensor);
  }
}

void Completion::ReleaseResult(job::ClientRecord& client, uint64_t request_id) {
  auto it = client.held_results.find(request_id);
  if (it == client.held_results.end()) {
    log::Exec().debug("client {} released request {}, which holds no result", client.id,
                      request_id);
    return;
  }
  client.result_bytes_held -= it->second.bytes;
  results_->Release(it->second.block);
  client.held_results.erase(it);
}

void Completion::ReleaseAllResults(job::ClientRecord& client) {
  if (results_ != nullptr) {
    for (const auto& [request_id, held] : client.held_results) results_->Release(held.block);
  }
  client.held_results.clear();
  client.result_bytes_held = 0;
}

void Completion::RecordNegotiation(const negotiation::ReadyTensor& tensor) {
  observe::JobTimelines& timeline = parts_.timeline;
  if (!timeline.active() || tensor.submissions.empty()) return;
  std::vector<observe::RankArrival> arrivals;
  for (const negotiation::Submission& submission : tensor.submissions) {
    arrivals.push_back({submission.set_rank, MonotonicNanos(submission.at)});
  }
  timeline.Negotiation(TimelineName(tensor), tensor.request().collective(),
                       MonotonicNanos(tensor.first_at), MonotonicNanos(tensor.ready_at), arrivals);
}

void Completion::DeviceDone(uint64_t device_batch, Clock::time_point started) {
  const auto rows = device_rows_.find(device_batch);
  if (rows == device_rows_.end()) return;
  const uint64_t now = MonotonicNanos();
  for (const auto& [name, bytes] : rows->second) {
    parts_.timeline.Phase(name, exec::kPhaseGpu, MonotonicNanos(started), now, bytes);
  }
  device_rows_.erase(rows);
}

}  // namespace collective::daemon::engine
