// Engine: point-to-point messages — a validated send or receive waits in the
// message matcher (negotiation/message_matcher.h) for its other half; a
// matched pair runs in RunReady like any data collective (exec/ops/
// message.cc) and completes through CompleteBatch. Only the two ranks take
// part: a message waits for nobody else and holds up no collective.
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "daemon/engine/engine.h"

namespace collective::daemon::engine {

void Engine::OnMessage(job::ClientRecord& client, v1::TensorRequest& request,
                       const job::ProcessSet& set) {
  const bool send = request.collective() == v1::COLLECTIVE_SEND;
  const std::string what =
      absl::StrCat(send ? "send to" : "receive from", " rank ", request.peer_rank(), " with tag ",
                   request.tag(), " (request ", request.request_id(), ")");
  absl::Status status;
  if (request.peer_rank() >= set.size()) {
    status = absl::InvalidArgumentError(absl::StrCat(what, ": rank ", request.peer_rank(),
                                                     " is not a rank of process set ", set.id,
                                                     " (size ", set.size(), ")"));
  } else if (const int32_t peer = set.ranks[request.peer_rank()]; !job_->layout().IsLocal(peer)) {
    status = absl::UnimplementedError(absl::StrCat(
        what, ": rank ", peer, " (global) runs on node ", job_->layout().NodeOf(peer),
        " and this rank on node ", job_->layout().node,
        "; point-to-point messages between ranks of different nodes are not supported yet, "
        "only between ranks of one node"));
  }
  if (!status.ok()) {
    const log::ScopedContext about({.rank = client.topology.rank(), .tensor = request.name()});
    log::Coord().debug("{}: {}", job::DescribeMember(client), status.message());
    CompleteWithError(client, request.request_id(), status);
    return;
  }
  client.outstanding[request.request_id()] = request.length();
  if (send) client.bytes_submitted += request.length();
  messages_->Add(negotiation::Submission{.client = &client,
                                         .set_rank = set.RankOf(client.topology.rank()),
                                         .rank = client.topology.rank(),
                                         .request = std::move(request),
                                         .at = Clock::now()},
                 set);
}

void Engine::FailMessages(std::vector<negotiation::Submission> halves, const absl::Status& why) {
  for (const negotiation::Submission& half : halves) {
    CompleteWithError(*half.client, half.request.request_id(), why);
  }
}

void Engine::DescribeMessages(Clock::time_point now, v1::StatusResponse& response) const {
  for (const negotiation::WaitingMessage& waiting : messages_->Waiting()) {
    v1::PendingMessage* message = response.add_pending_messages();
    message->set_process_set_id(waiting.process_set_id);
    message->set_collective(waiting.collective);
    message->set_rank(waiting.rank);
    message->set_peer_rank(waiting.peer);
    message->set_tag(waiting.tag);
    message->set_dtype(waiting.dtype);
    message->set_bytes(waiting.bytes);
    message->set_age_seconds(std::chrono::duration<double>(now - waiting.since).count());
  }
}

}  // namespace collective::daemon::engine
