#include "daemon/engine/intake.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/job/request_validator.h"

namespace collective::daemon::engine {

bool Intake::Drain(job::Job& job) {
  bool any = false;
  for (const auto& member : job.members()) {
    if (member && member->attached() && member->live()) any = Drain(job, *member) || any;
  }
  return any;
}

bool Intake::Drain(job::Job& job, job::ClientRecord& client) {
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
      run_.Drop(client, why);
      return true;
    }
    any = true;
    OnMessage(job, client, message);
  }
  return any;
}

void Intake::OnMessage(job::Job& job, job::ClientRecord& client, v1::ClientMessage& message) {
  // Copy-out spans name requests whose results the same message releases.
  OnCopyOuts(client, message);
  for (uint64_t request_id : message.released()) completion_.ReleaseResult(client, request_id);
  if (message.has_cuda()) run_.RegisterCuda(client, message.cuda());
  if (message.has_submit()) {
    for (v1::TensorRequest& request : *message.mutable_submit()->mutable_requests()) {
      Admit(job, client, request);
    }
  }
}

void Intake::Admit(job::Job& job, job::ClientRecord& client, v1::TensorRequest& request) {
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
  if (job.state() != job::JobState::kRunning) {
    completion_.CompleteWithError(client, request_id, job.failure());
    return;
  }
  if (client.outstanding.size() >= config_.max_outstanding_requests) {
    completion_.CompleteWithError(
        client, request_id,
        absl::ResourceExhaustedError(absl::StrCat(
            "request ", request_id, " ('", request.name(), "'): ", client.outstanding.size(),
            " requests are outstanding; the limit is ", config_.max_outstanding_requests,
            " (max_outstanding_requests)")));
    return;
  }
  const job::RequestLimits limits{.max_name_bytes = config_.max_name_bytes,
                                  .max_dims = job::kMaxDims,
                                  .arena_bytes = client.arena_bytes,
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
    auto found = job.process_sets().FindForMember(request.process_set_id(), client.topology.rank());
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
    completion_.CompleteWithError(client, request_id, status);
    return;
  }
  run_.Admitted(client, request, *set);
}

void Intake::OnCopyOuts(job::ClientRecord& client, const v1::ClientMessage& message) {
  if (!timeline_.active()) return;
  for (const v1::CopyOutSpan& span : message.copy_outs()) {
    const auto held = client.held_results.find(span.request_id());
    if (held == client.held_results.end() || held->second.tensor.empty()) continue;
    timeline_.CopyOut(held->second.tensor, client.topology.rank(), span.start_ns(), span.end_ns());
  }
}

}  // namespace collective::daemon::engine
