// Engine: requests — submission (through the clients' submission rings) and
// validation, completion through the clients' completion rings (a failure's
// text with its record), and the release of results.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/engine/engine.h"
#include "daemon/job/request_validator.h"

namespace collective::daemon::engine {

void Engine::OnClientMessage(ClientMessageEvent& event) {
  v1::ClientMessage& message = event.message;
  if (message.has_attach()) {
    OnAttach(event.link, event.peer, message.attach());
    return;
  }
  job::ClientRecord* client = job_ == nullptr ? nullptr : job_->FindByLink(event.link.get());
  if (client == nullptr) {
    event.link->Close(absl::FailedPreconditionError(
        "the first message of a session must attach it to a registered client"));
    return;
  }
  if (client->gone) return;
  if (message.has_submit() || message.released_size() > 0 || message.copy_outs_size() > 0 ||
      message.has_cuda()) {
    // One path in: what the client sends about its requests goes through its
    // ring, where the engine reads it in order with the rest.
    DropClient(*client, absl::InvalidArgumentError(absl::StrCat(
                            job::DescribeMember(*client),
                            " sent submissions, releases or CUDA registrations on its session "
                            "stream; they go through the submission ring in the client's "
                            "shared-memory segment, and the stream carries only attach and leave; "
                            "the job cannot continue")));
    return;
  }
  if (message.has_leave()) OnLeave(*client);
}

void Engine::DropClient(job::ClientRecord& client, const absl::Status& why) {
  client.gone = true;
  client.segment->Unlink();
  ReleaseAllResults(client);
  ForgetDevices(client);
  log::Coord().error("{}", why.message());
  FailJob(why);
  if (client.link) client.link->Close(why);
}

void Engine::OnSubmissions(job::ClientRecord& client, v1::ClientMessage& message) {
  // Copy-out spans name requests whose results the same message releases.
  OnCopyOuts(client, message);
  for (uint64_t request_id : message.released()) ReleaseResult(client, request_id);
  if (message.has_cuda()) OnRegisterCuda(client, message.cuda());
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

bool Engine::DrainSubmissionRing(job::ClientRecord& client) {
  bool any = false;
  std::string payload;
  v1::ClientMessage message;
  while (client.live()) {
    absl::StatusOr<bool> next = client.submissions->Next(&payload);
    absl::Status why;  // the client cannot go on, and neither can the job
    if (client.guard.faulted()) {
      // The ring read zeros from pages the client took away; say that.
      why = job::SegmentTruncated(client);
    } else if (!next.ok()) {
      // The ring cannot be trusted any more.
      why = absl::DataLossError(
          absl::StrCat(job::DescribeMember(client), " corrupted its submission ring (",
                       next.status().message(), "); the job cannot continue"));
    } else if (!*next) {
      break;
    } else if (!message.ParseFromString(payload)) {
      // The ring's framing held: the record's bytes are no message.
      why = absl::InvalidArgumentError(absl::StrCat(
          job::DescribeMember(client), " sent a submission of ", payload.size(),
          " bytes that could not be parsed as a ClientMessage; the job cannot continue"));
    } else if (message.has_attach() || message.has_leave()) {
      why = absl::InvalidArgumentError(
          absl::StrCat(job::DescribeMember(client),
                       " sent attach or leave through its submission ring; they go on the session "
                       "stream, and the ring carries only submissions, releases and CUDA "
                       "registrations; the job cannot continue"));
    }
    if (!why.ok()) {
      DropClient(client, why);
      return true;
    }
    any = true;
    OnSubmissions(client, message);
  }
  return any;
}

void Engine::OnSubmit(job::ClientRecord& client, v1::TensorRequest& request) {
  const uint64_t request_id = request.request_id();
  ++client.requests_submitted;
  if (client.outstanding.contains(request_id) || client.held_results.contains(request_id)) {
    // A plain failure would read as the completion of the request in flight
    // with this id: the flag says the record refuses only this submission.
    shm::CompletionRecord record{};
    record.request_id = request_id;
    record.status_code = static_cast<int32_t>(absl::StatusCode::kInvalidArgument);
    record.flags = shm::kRecordRefusedDuplicateId;
    client.ring->Publish(record, absl::StrCat("request id ", request_id,
                                              " is already in use by a request in flight or a "
                                              "result not yet released"));
    return;
  }
  if (job_->state() != job::JobState::kRunning) {
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
  const job::RequestLimits limits{.max_name_bytes = config_.max_name_bytes,
                                  .max_dims = job::kMaxDims,
                                  .arena_bytes = client.segment->arena_bytes(),
                                  .cuda = gpu_.built()};
  absl::Status status = job::ValidateRequest(request, limits);
  if (status.ok() && request.memory() == v1::MEMORY_KIND_CUDA) {
    // Its allocations and event slot; the slot is the request's from here
    // until it completes.
    status = Annotate(gpu_.Admit(client.id, request),
                      absl::StrCat("request ", request_id, " ('", request.name(), "')"));
  }
  const job::ProcessSet* set = nullptr;
  if (status.ok()) {
    auto found =
        job_->process_sets().FindForMember(request.process_set_id(), client.topology.rank());
    if (found.ok()) {
      set = *found;
    } else {
      status = absl::Status(found.status().code(),
                            absl::StrCat("request ", request_id, " ('", request.name(),
                                         "'): ", found.status().message()));
    }
  }
  if (!status.ok()) {
    const log::ScopedContext about({.rank = client.topology.rank(), .tensor = request.name()});
    log::Coord().debug("{}: {}", job::DescribeMember(client), status.message());
    CompleteWithError(client, request_id, status);
    return;
  }
  if (negotiation::IsPointToPoint(request.collective())) {
    OnMessage(client, request, *set);
    return;
  }
  const int32_t local_members = across_.LocalMembers(*set);
  const bool join = request.collective() == v1::COLLECTIVE_JOIN;
  client.outstanding[request_id] = request.length();
  client.bytes_submitted += request.length();
  const int32_t set_rank = set->RankOf(client.topology.rank());
  const int32_t set_id = request.process_set_id();
  status = coordinator_->Add(negotiation::Submission{.client = &client,
                                                     .set_rank = set_rank,
                                                     .rank = client.topology.rank(),
                                                     .request = std::move(request),
                                                     .at = Clock::now()},
                             set->size(), local_members);
  if (!status.ok()) {
    CompleteWithError(client, request_id, status);
    return;
  }
  if (join) {
    // Across nodes node 0 says when the set begins refusing (Decide), so
    // that every node names the same first rank.
    if (!across_.SpansNodes(*set)) FailRefused(coordinator_->RefuseAfterJoin(set_id, set_rank));
    coordinator_->Join(set_id, set_rank, set->size());
    across_.AnnounceJoin(*set, set_rank);
  }
}

void Engine::Complete(job::ClientRecord& client, const v1::TensorRequest& request, uint64_t block,
                      uint64_t slot, const exec::ops::RankResult& result, const std::string& tensor,
                      uint32_t flags) {
  client.outstanding.erase(request.request_id());
  if (gpu_.has_admitted()) gpu_.Finish(client.id, request.request_id());
  totals_.set_requests(totals_.requests() + 1);
  if (result.in_output) flags |= shm::kRecordResultInOutput;
  // A result already in the client's own output leaves nothing to read here.
  if (client.gone || (flags & shm::kRecordResultInOutput) != 0) {
    if (block != kNoBlock) job_->results()->Release(block);
    if (client.gone) return;
  } else if (block != kNoBlock) {
    // A CUDA tensor's result is in device memory; only its splits are here.
    const uint64_t held =
        (flags & shm::kRecordDeviceResult) != 0 ? sizeof(int64_t) * result.aux_count : result.bytes;
    client.held_results[request.request_id()] = {block, held,
                                                 timeline_.active() ? tensor : std::string()};
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

void Engine::FailSubmissions(std::vector<negotiation::PendingTensor> tensors,
                             const absl::Status& why) {
  for (negotiation::PendingTensor& tensor : tensors) {
    for (auto& submission : tensor.by_rank) {
      if (submission.has_value()) {
        CompleteWithError(*submission->client, submission->request.request_id(), why);
      }
    }
  }
}

void Engine::FailRefused(std::vector<std::pair<negotiation::PendingTensor, absl::Status>> refused) {
  for (auto& [tensor, why] : refused) {
    const log::ScopedContext about({.tensor = tensor.name});
    log::Coord().warn("{}", why.message());
    std::vector<negotiation::PendingTensor> one;
    one.push_back(std::move(tensor));
    FailSubmissions(std::move(one), why);
  }
}

void Engine::FailReady(std::vector<negotiation::ReadyTensor> tensors, const absl::Status& why) {
  for (const negotiation::ReadyTensor& tensor : tensors) FailTensor(tensor, why);
}

void Engine::OnCopyOuts(job::ClientRecord& client, const v1::ClientMessage& message) {
  if (!timeline_.active()) return;
  for (const v1::CopyOutSpan& span : message.copy_outs()) {
    const auto held = client.held_results.find(span.request_id());
    if (held == client.held_results.end() || held->second.tensor.empty()) continue;
    timeline_.CopyOut(held->second.tensor, client.topology.rank(), span.start_ns(), span.end_ns());
  }
}

void Engine::CompleteWithError(job::ClientRecord& client, uint64_t request_id,
                               const absl::Status& status) {
  client.outstanding.erase(request_id);
  if (gpu_.has_admitted()) gpu_.Finish(client.id, request_id);
  totals_.set_errors(totals_.errors() + 1);
  metrics_.RequestFailed(status);
  if (client.gone) return;
  shm::CompletionRecord record{};
  record.request_id = request_id;
  record.status_code = static_cast<int32_t>(status.code());
  client.ring->Publish(record, status.message());
}

void Engine::ReleaseResult(job::ClientRecord& client, uint64_t request_id) {
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

void Engine::ReleaseAllResults(job::ClientRecord& client) {
  if (job_->results() != nullptr) {
    for (const auto& [request_id, held] : client.held_results) {
      job_->results()->Release(held.block);
    }
  }
  client.held_results.clear();
  client.result_bytes_held = 0;
}

}  // namespace collective::daemon::engine
