#include "daemon/engine/point_to_point.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "daemon/exec/ops/collective_op.h"

namespace collective::daemon::engine {

PointToPoint::PointToPoint(const config::DaemonConfig& config, job::Job& job,
                           Completion& completion, exec::Executor& executor, AcrossNodes& across,
                           Run& run)
    : config_(config),
      job_(job),
      completion_(completion),
      executor_(executor),
      across_(across),
      run_(run) {}

PointToPoint::~PointToPoint() {
  // Messages still moving (MPI abandoned, or the daemon stops) are left to
  // MPI with their buffers, as AcrossNodes leaves an abandoned world's
  // transfers.
  for (MessageRun& run : runs_) {
    (void)run.transfer.release();
    (void)run.drain.release();
  }
}

void PointToPoint::BeginAcrossNodes(negotiation::ControlLink& link, exec::NodeTransport& transport,
                                    const job::NodeLayout& layout) {
  transport_ = &transport;
  remote_ = std::make_unique<negotiation::RemoteMessages>(link, layout);
}

void PointToPoint::Add(job::ClientRecord& client, v1::TensorRequest& request,
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
  } else if (const int32_t peer = set.ranks[request.peer_rank()]; !job_.layout().IsLocal(peer)) {
    if (remote_ == nullptr) {
      status = absl::InternalError(absl::StrCat(what, ": rank ", peer, " (global) runs on node ",
                                                job_.layout().NodeOf(peer),
                                                " but this job does not run across nodes"));
    } else if (request.memory() == v1::MEMORY_KIND_CUDA) {
      status = absl::UnimplementedError(absl::StrCat(
          what, ": rank ", peer, " (global) runs on node ", job_.layout().NodeOf(peer),
          "; CUDA tensors travel between ranks of one node only (send a host copy across nodes)"));
    }
  }
  if (!status.ok()) {
    const log::ScopedContext about({.rank = client.topology.rank(), .tensor = request.name()});
    log::Coord().debug("{}: {}", job::DescribeMember(client), status.message());
    completion_.CompleteWithError(client, request.request_id(), status);
    return;
  }
  client.outstanding[request.request_id()] = request.length();
  if (send) client.bytes_submitted += request.length();
  negotiation::Submission submission{.client = &client,
                                     .set_rank = set.RankOf(client.topology.rank()),
                                     .rank = client.topology.rank(),
                                     .request = std::move(request),
                                     .at = Clock::now()};
  if (job_.layout().IsLocal(set.ranks[submission.request.peer_rank()])) {
    local_.Add(std::move(submission), set);
    return;
  }
  // A notice that already came meets a send at once, without waiting for
  // the engine's next look at the other daemons.
  absl::Status added = remote_->Add(std::move(submission), set);
  if (added.ok()) {
    if (absl::StatusOr<bool> polled = Poll(); !polled.ok()) added = polled.status();
  }
  if (!added.ok()) {
    run_.LostOtherNodes(added);
    return;
  }
  run_.Moved();
}

void PointToPoint::FailWaiting(const absl::Status& why) {
  completion_.FailHalves(local_.TakeAll(), why);
  // Across nodes, a message whose bytes move finishes (both daemons
  // started it); one still in the rendezvous fails.
  if (remote_ != nullptr) completion_.FailHalves(remote_->TakeAll(), why);
  for (negotiation::RemoteMessages::AnsweredReceive& receive : receives_waiting_space_) {
    completion_.CompleteWithError(*receive.receive.client, receive.receive.request.request_id(),
                                  why);
    if (receive.status.ok() && receive.data_follows) Drain(receive);
  }
  receives_waiting_space_.clear();
}

void PointToPoint::RemoveSet(int32_t id, const absl::Status& why) {
  completion_.FailHalves(local_.TakeSet(id), why);
  if (remote_ == nullptr) return;
  std::vector<uint64_t> announced;
  completion_.FailHalves(remote_->TakeSet(id, &announced), why);
  // The sender's node may have matched one of these receives first: its
  // bytes then still come, on this set's communicator, which must stay open
  // to take them (the set's id may name another set soon).
  for (const uint64_t receive : announced) retired_receive_spans_[receive] = across_.SpanOf(id);
}

std::vector<negotiation::WaitingMessage> PointToPoint::Waiting() const {
  std::vector<negotiation::WaitingMessage> all = local_.Waiting();
  if (remote_ != nullptr) {
    std::vector<negotiation::WaitingMessage> remote = remote_->Waiting();
    all.insert(all.end(), remote.begin(), remote.end());
    std::stable_sort(all.begin(), all.end(),
                     [](const negotiation::WaitingMessage& a,
                        const negotiation::WaitingMessage& b) { return a.since < b.since; });
  }
  return all;
}

void PointToPoint::Describe(Clock::time_point now, v1::StatusResponse& response) const {
  for (const negotiation::WaitingMessage& waiting : Waiting()) {
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

namespace {

// Messages up to this size travel inside the sender's node's answer (one
// control message); larger ones as data on the set's communicator, which
// the receiver's node posts once the answer came.
constexpr uint64_t kInlineMessageBytes = 64 << 10;

// The tensor a message across nodes runs as on this node: the local half
// only (the other node completes its own).
exec::FusedBatch MessageBatch(negotiation::Submission local, const negotiation::Submission& peer,
                              std::shared_ptr<const job::SetSpan> span, int32_t set_size) {
  const bool send = local.request.collective() == v1::COLLECTIVE_SEND;
  const negotiation::Submission& sender = send ? local : peer;
  const negotiation::Submission& receiver = send ? peer : local;
  negotiation::ReadyTensor tensor{
      .name = negotiation::MessageName(local.request.process_set_id(), sender.set_rank,
                                       receiver.set_rank, local.request.tag()),
      .process_set_id = local.request.process_set_id(),
      .set_size = set_size,
      .completed_by = peer.set_rank,
      .first_at = std::min(local.at, peer.at),
      .ready_at = Clock::now(),
      .across_nodes = true,
      .span = std::move(span),
      .local_members = 1};
  tensor.submissions.push_back(std::move(local));
  exec::FusedBatch batch;
  batch.bytes = exec::SlotBytes(tensor);
  batch.tensors.push_back(std::move(tensor));
  return batch;
}

}  // namespace

absl::StatusOr<bool> PointToPoint::Poll() {
  if (remote_ == nullptr) return false;
  absl::StatusOr<negotiation::RemoteMessages::Polled> polled = remote_->Poll();
  if (!polled.ok()) return polled.status();
  bool worked = !polled->sends.empty() || !polled->receives.empty() || !polled->refused.empty();
  for (auto& [send, why] : polled->refused) {
    log::Coord().warn("{}", why.message());
    completion_.CompleteWithError(*send.client, send.request.request_id(), why);
  }
  for (negotiation::RemoteMessages::MatchedSend& send : polled->sends) {
    StartSend(std::move(send));
  }
  for (negotiation::RemoteMessages::AnsweredReceive& receive : polled->receives) {
    receives_waiting_space_.push_back(std::move(receive));
  }
  for (const negotiation::RemoteMessages::AnsweredReceive& orphan : polled->orphaned) {
    Drain(orphan);
  }
  worked = worked || !polled->orphaned.empty();
  while (!receives_waiting_space_.empty()) {
    if (!StartReceive(receives_waiting_space_.front())) break;
    receives_waiting_space_.pop_front();
    worked = true;
  }
  for (auto it = runs_.begin(); it != runs_.end();) {
    absl::StatusOr<bool> done = it->transfer->Test();
    if (done.ok() && !*done) {
      ++it;
      continue;
    }
    MessageRun run = std::move(*it);
    it = runs_.erase(it);
    Finish(std::move(run), done.status());
    worked = true;
  }
  if (worked) run_.Moved();
  return worked;
}

void PointToPoint::StartSend(negotiation::RemoteMessages::MatchedSend send) {
  const job::ProcessSet* set = job_.process_sets().Find(send.send.request.process_set_id());
  std::shared_ptr<const job::SetSpan> span = across_.SpanOf(send.send.request.process_set_id());
  const uint64_t bytes = send.send.request.length();
  const bool inline_bytes = bytes <= kInlineMessageBytes;
  MessageRun run{
      .batch = MessageBatch(send.send, send.receive, span, set != nullptr ? set->size() : 0),
      .bytes = bytes};
  // No result: the receiver's daemon holds it.
  run.outcome.block = kNoBlock;
  run.outcome.slots = {0};
  run.outcome.started = Clock::now();
  const std::byte* source = exec::ops::InputOf(send.send);
  absl::Status answered =
      remote_->Answer(send,
                      inline_bytes ? absl::string_view(reinterpret_cast<const char*>(source), bytes)
                                   : absl::string_view(),
                      !inline_bytes);
  if (answered.ok() && !inline_bytes) {
    // The configured chunk size, never the tuned one: the receiver's node
    // must cut the bytes alike, and a message is no decision that carries
    // tuned values to every node at the same point.
    absl::StatusOr<exec::Pending> started =
        span == nullptr
            ? absl::InternalError(absl::StrCat("no communicator for process set ",
                                               send.send.request.process_set_id()))
            : transport_->StartSend(*span, span->IndexOf(send.receive.set_rank), source, bytes,
                                    negotiation::RemoteMessages::DataTag(send.id),
                                    config_.cross_node_chunk_bytes);
    if (started.ok()) {
      run.outcome.finished = Clock::now();
      run.transfer = std::move(*started);
      runs_.push_back(std::move(run));
      return;
    }
    answered = started.status();
  }
  run.outcome.finished = Clock::now();
  Finish(std::move(run), answered);
}

bool PointToPoint::StartReceive(negotiation::RemoteMessages::AnsweredReceive& receive) {
  if (!receive.status.ok()) {
    log::Coord().warn("{}", receive.status.message());
    completion_.CompleteWithError(*receive.receive.client, receive.receive.request.request_id(),
                                  receive.status);
    return true;
  }
  const v1::TensorRequest& request = receive.receive.request;
  const job::ProcessSet* set = job_.process_sets().Find(request.process_set_id());
  std::shared_ptr<const job::SetSpan> span = across_.SpanOf(request.process_set_id());
  MessageRun run{
      .batch = MessageBatch(receive.receive, receive.send, span, set != nullptr ? set->size() : 0),
      .bytes = request.length()};
  if (request.has_output_offset()) {
    run.outcome.block = kNoBlock;  // the bytes go to the receiver's own output
    run.outcome.slots = {0};
  } else {
    run.outcome = executor_.Reserve(run.batch, *job_.results());
    if (run.outcome.deferred) return false;  // a release makes room
  }
  run.outcome.started = Clock::now();
  std::byte* destination = request.has_output_offset()
                               ? receive.receive.client->segment->arena() + request.output_offset()
                               : job_.results()->data() + run.outcome.slots.front();
  absl::Status status = run.outcome.status;
  if (status.ok() && !receive.data_follows) {
    if (receive.data.size() != request.length()) {
      status = absl::DataLossError(absl::StrCat("the ", run.batch.tensors.front().name,
                                                " arrived with ", receive.data.size(),
                                                " bytes instead of ", request.length()));
    } else if (!receive.data.empty()) {
      std::memcpy(destination, receive.data.data(), receive.data.size());
    }
  } else if (status.ok()) {
    absl::StatusOr<exec::Pending> started =
        span == nullptr
            ? absl::InternalError(
                  absl::StrCat("no communicator for process set ", request.process_set_id()))
            : transport_->StartReceive(
                  *span, span->IndexOf(receive.send.set_rank), destination, request.length(),
                  negotiation::RemoteMessages::DataTag(receive.id), config_.cross_node_chunk_bytes);
    if (started.ok()) {
      run.outcome.finished = Clock::now();
      run.transfer = std::move(*started);
      runs_.push_back(std::move(run));
      return true;
    }
    status = started.status();
  }
  run.outcome.finished = Clock::now();
  Finish(std::move(run), status);
  return true;
}

void PointToPoint::Drain(const negotiation::RemoteMessages::AnsweredReceive& receive) {
  const v1::TensorRequest& request = receive.send.request;
  std::shared_ptr<const job::SetSpan> span;
  if (auto retired = retired_receive_spans_.find(receive.id);
      retired != retired_receive_spans_.end()) {
    span = std::move(retired->second);  // its set was removed (see RunControl)
    retired_receive_spans_.erase(retired);
  } else {
    span = across_.SpanOf(request.process_set_id());
  }
  if (span == nullptr) {
    log::Mpi().warn("no communicator for process set {} to take the {} bytes of a failed receive",
                    request.process_set_id(), request.length());
    return;
  }
  MessageRun run{.bytes = request.length(),
                 .drain = std::make_unique<std::vector<std::byte>>(request.length()),
                 .drain_span = span};
  absl::StatusOr<exec::Pending> started = transport_->StartReceive(
      *span, span->IndexOf(receive.send.set_rank), run.drain->data(), request.length(),
      negotiation::RemoteMessages::DataTag(receive.id), config_.cross_node_chunk_bytes);
  if (!started.ok()) {
    log::Mpi().warn("cannot take the bytes of a failed receive: {}", started.status().message());
    return;
  }
  run.transfer = std::move(*started);
  runs_.push_back(std::move(run));
}

void PointToPoint::Finish(MessageRun run, const absl::Status& status) {
  if (run.drain != nullptr) {
    if (!status.ok()) log::Mpi().warn("taking a failed receive's bytes: {}", status.message());
    run_.MaybeTearDown();
    return;
  }
  BatchRun batch_run{.where = BatchRun::Where::kAcrossNodes,
                     .outcome = std::move(run.outcome),
                     .transferred = run.bytes,
                     .transferred_at = Clock::now()};
  if (batch_run.outcome.status.ok() && !status.ok()) {
    // The peer's half may be half done: MPI cannot be trusted with this
    // world any more, and what the transfer holds stays MPI's.
    const absl::Status why = absl::UnavailableError(
        absl::StrCat("job '", job_.id(), "' could not move the ", run.batch.tensors.front().name,
                     " across nodes: ", status.message()));
    log::Mpi().error("{}", why.message());
    run_.AbandonWorld(why);
    (void)run.transfer.release();
    batch_run.outcome.status = why;
    batch_run.breaks_job = true;
  } else if (batch_run.outcome.status.ok()) {
    executor_.CheckFaults(run.batch, *job_.results(), batch_run.outcome);
    batch_run.breaks_job = !batch_run.outcome.corrupted.empty() || batch_run.outcome.results_lost;
  }
  completion_.CompleteBatch(run.batch, batch_run);
  run_.MaybeTearDown();
}

void PointToPoint::Abandon(const absl::Status& why) {
  for (MessageRun& run : runs_) {
    (void)run.transfer.release();  // MPI keeps the buffers it may still write
    (void)run.drain.release();
    if (!run.batch.tensors.empty()) completion_.FailTensor(run.batch.tensors.front(), why);
  }
  runs_.clear();
  for (negotiation::RemoteMessages::AnsweredReceive& receive : receives_waiting_space_) {
    completion_.CompleteWithError(*receive.receive.client, receive.receive.request.request_id(),
                                  why);
  }
  receives_waiting_space_.clear();
  if (remote_ != nullptr) completion_.FailHalves(remote_->TakeAll(), why);
}

}  // namespace collective::daemon::engine
