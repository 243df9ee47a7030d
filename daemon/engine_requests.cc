// Engine: requests — submission and validation, running what is ready,
// completion through the clients' rings, and the release of results.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/engine.h"
#include "daemon/mismatch.h"
#include "daemon/request_validator.h"

namespace collective::daemon {

void Engine::OnClientMessage(ClientMessageEvent& event) {
  v1::ClientMessage& message = event.message;
  if (message.has_attach()) {
    OnAttach(event.link, event.peer, message.attach());
    return;
  }
  ClientRecord* client = job_ == nullptr ? nullptr : job_->FindByLink(event.link.get());
  if (client == nullptr) {
    event.link->Close(absl::FailedPreconditionError(
        "the first message of a session must attach it to a registered client"));
    return;
  }
  if (client->gone) return;
  if (message.has_leave()) {
    OnSubmissions(*client, message);
    OnLeave(*client);
    return;
  }
  OnSubmissions(*client, message);
}

void Engine::OnSubmissions(ClientRecord& client, v1::ClientMessage& message) {
  for (uint64_t request_id : message.released()) ReleaseResult(client, request_id);
  if (message.has_submit()) {
    for (v1::TensorRequest& request : *message.mutable_submit()->mutable_requests()) {
      OnSubmit(client, request);
    }
  }
}

bool Engine::DrainSubmissionRings() {
  if (job_ == nullptr) return false;
  bool any = false;
  for (const auto& member : job_->members()) {
    if (member && member->attached() && member->live()) any = DrainSubmissionRing(*member) || any;
  }
  return any;
}

bool Engine::DrainSubmissionRing(ClientRecord& client) {
  bool any = false;
  std::string payload;
  v1::ClientMessage message;
  while (client.live()) {
    absl::StatusOr<bool> next = client.submissions->Next(&payload);
    absl::Status broken;
    if (client.guard.faulted()) {
      // The ring read zeros from pages the client took away; say that.
      broken = SegmentTruncated(client);
    } else if (!next.ok()) {
      broken = next.status();
    } else if (!*next) {
      break;
    } else if (!message.ParseFromString(payload) || message.has_attach() || message.has_leave()) {
      broken = absl::DataLossError("a record is not a submission message");
    }
    if (!broken.ok()) {
      // The ring cannot be trusted any more; nor can the job's progress.
      client.gone = true;
      client.segment->Unlink();
      ReleaseAllResults(client);
      const absl::Status why =
          broken.code() == absl::StatusCode::kDataLoss && client.guard.faulted()
              ? broken
              : absl::DataLossError(absl::StrCat(DescribeMember(client),
                                                 " corrupted its submission ring (",
                                                 broken.message(), "); the job cannot continue"));
      log::Coord().error("{}", why.message());
      FailJob(why);
      if (client.link) client.link->Close(why);
      return true;
    }
    any = true;
    OnSubmissions(client, message);
  }
  return any;
}

void Engine::OnSubmit(ClientRecord& client, v1::TensorRequest& request) {
  const uint64_t request_id = request.request_id();
  ++client.requests_submitted;
  if (client.outstanding.contains(request_id) || client.held_results.contains(request_id)) {
    // Completing it would confuse the client's own bookkeeping of the first
    // request with this id; say so on the stream only.
    v1::DaemonMessage message;
    v1::RequestFailed* failed = message.mutable_request_failed();
    failed->set_request_id(request_id);
    failed->set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
    failed->set_message(absl::StrCat("request id ", request_id, " is already in use"));
    client.link->Send(std::move(message));
    return;
  }
  if (job_->state() != JobState::kRunning) {
    CompleteWithError(client, request_id, job_->failure());
    return;
  }
  if (client.outstanding.size() >= config_.max_outstanding_requests) {
    CompleteWithError(client, request_id,
                      absl::ResourceExhaustedError(absl::StrCat(
                          "request ", request_id, " ('", request.name(), "'): ",
                          client.outstanding.size(), " requests are outstanding; the limit is ",
                          config_.max_outstanding_requests, " (max_outstanding_requests)")));
    return;
  }
  const RequestLimits limits{.max_name_bytes = config_.max_name_bytes,
                             .max_dims = kMaxDims,
                             .arena_bytes = client.segment->arena_bytes()};
  if (absl::Status status = ValidateRequest(request, limits); !status.ok()) {
    log::Coord().debug("{}: {}", DescribeMember(client), status.message());
    CompleteWithError(client, request_id, status);
    return;
  }
  client.outstanding[request_id] = request.length();
  client.bytes_submitted += request.length();
  const int32_t rank = client.topology.rank();
  if (absl::Status status =
          coordinator_->Add(rank, Submission{&client, std::move(request), Clock::now()});
      !status.ok()) {
    CompleteWithError(client, request_id, status);
  }
}

bool Engine::RunReady() {
  if (coordinator_ == nullptr) return false;
  std::vector<ReadyTensor> ready = coordinator_->TakeReady();
  bool ran = !ready.empty();
  std::vector<ReadyTensor> agreed;
  for (ReadyTensor& tensor : ready) {
    if (absl::Status status = CheckAgreement(tensor); !status.ok()) {
      log::Coord().warn("{}", status.message());
      for (const Submission& submission : tensor.submissions) {
        CompleteWithError(*submission.client, submission.request.request_id(), status);
      }
      continue;
    }
    agreed.push_back(std::move(tensor));
  }
  for (FusedBatch& batch : PlanFusion(std::move(agreed), config_.fusion_threshold_bytes)) {
    deferred_.push_back(std::move(batch));
  }
  while (!deferred_.empty() && job_ != nullptr && job_->state() == JobState::kRunning) {
    const Executor::Outcome outcome = executor_.RunAllreduce(deferred_.front(), *job_->results());
    if (outcome.deferred) {
      log::Exec().debug("'{}' waits for result space ({} of {} bytes in use)",
                        deferred_.front().tensors.front().name, job_->results()->bytes_in_use(),
                        job_->results()->capacity());
      return ran;  // a release will make room
    }
    ran = true;
    const FusedBatch batch = std::move(deferred_.front());
    deferred_.pop_front();
    CompleteBatch(batch, outcome);
    if (!outcome.corrupted.empty() || outcome.results_lost) FailJob(outcome.status);
  }
  return ran;
}

void Engine::CompleteBatch(const FusedBatch& batch, const Executor::Outcome& outcome) {
  if (!outcome.status.ok()) {
    for (const ReadyTensor& tensor : batch.tensors) {
      for (const Submission& submission : tensor.submissions) {
        CompleteWithError(*submission.client, submission.request.request_id(), outcome.status);
      }
    }
    return;
  }
  totals_.set_fused_batches(totals_.fused_batches() + 1);
  for (size_t t = 0; t < batch.tensors.size(); ++t) {
    const ReadyTensor& tensor = batch.tensors[t];
    totals_.set_collectives(totals_.collectives() + 1);
    totals_.set_bytes_reduced(totals_.bytes_reduced() +
                              tensor.submissions.front().request.length() *
                                  tensor.submissions.size());
    for (const Submission& submission : tensor.submissions) {
      ClientRecord& client = *submission.client;
      const v1::TensorRequest& request = submission.request;
      client.outstanding.erase(request.request_id());
      totals_.set_requests(totals_.requests() + 1);
      if (client.gone) {
        job_->results()->Release(outcome.block);
        continue;
      }
      client.held_results[request.request_id()] = {outcome.block, request.length()};
      client.result_bytes_held += request.length();
      shm::CompletionRecord record{};
      record.request_id = request.request_id();
      record.result_offset = outcome.offsets[t];
      record.result_bytes = request.length();
      record.result_dim0 = request.shape_size() > 0 ? request.shape(0) : 0;
      client.ring->Publish(record);
    }
  }
}

void Engine::CompleteWithError(ClientRecord& client, uint64_t request_id,
                               const absl::Status& status) {
  client.outstanding.erase(request_id);
  totals_.set_errors(totals_.errors() + 1);
  if (client.gone) return;
  // The text first: a client that sees the failed record finds it waiting.
  if (client.link) {
    v1::DaemonMessage message;
    v1::RequestFailed* failed = message.mutable_request_failed();
    failed->set_request_id(request_id);
    failed->set_code(static_cast<int>(status.code()));
    failed->set_message(std::string(status.message()));
    client.link->Send(std::move(message));
  }
  shm::CompletionRecord record{};
  record.request_id = request_id;
  record.status_code = static_cast<int32_t>(status.code());
  client.ring->Publish(record);
}

void Engine::ReleaseResult(ClientRecord& client, uint64_t request_id) {
  auto it = client.held_results.find(request_id);
  if (it == client.held_results.end()) {
    log::Exec().debug("client {} released request {}, which holds no result", client.id,
                      request_id);
    return;
  }
  client.result_bytes_held -= it->second.bytes;
  job_->results()->Release(it->second.block);
  client.held_results.erase(it);
}

void Engine::ReleaseAllResults(ClientRecord& client) {
  if (job_->results() != nullptr) {
    for (const auto& [request_id, held] : client.held_results) {
      job_->results()->Release(held.block);
    }
  }
  client.held_results.clear();
  client.result_bytes_held = 0;
}

}  // namespace collective::daemon
