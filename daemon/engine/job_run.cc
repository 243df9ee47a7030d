#include "daemon/engine/job_run.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collective/build_config.h"
#include "common/logging.h"
#include "common/secrets_equal.h"
#include "common/status_macros.h"
#include "daemon/engine/ready_check.h"
#include "daemon/engine/world_link.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/job/request_validator.h"
#include "daemon/job/secrets.h"
#include "daemon/observe/job_report.h"

namespace collective::daemon::engine {
namespace {

// How often the engine looks whether a registered client that has not yet
// opened its session is still alive (only during that short window).
constexpr auto kAttachLivenessPoll = std::chrono::milliseconds(100);

// While transfers run, and for a short window after the negotiation moved
// (an announcement made or received, a decision taken), the next message
// usually follows within microseconds: look this often once the engine
// stopped looking at once (engine_spin.h), and sleep a whole cycle only when
// the window has passed. Sleeps, not spins: the trainers and daemons of a
// node often outnumber its cores.
constexpr auto kFastPoll = std::chrono::microseconds(50);

Clock::duration RegisterTimeout(const config::DaemonConfig& config) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(config.register_timeout_seconds));
}

// Alltoall's received splits, one array per rank, in the result segment.
uint64_t SplitsBytes(const negotiation::ReadyTensor& tensor) {
  return shm::RoundUp(sizeof(int64_t) * static_cast<uint64_t>(tensor.set_size),
                      shm::kDataAlignment);
}

}  // namespace

JobRun::JobRun(SharedParts& parts, std::unique_ptr<job::Job> job)
    : parts_(parts),
      config_(parts.config),
      job_(std::move(job)),
      tuning_(parts.config),
      gpu_(parts.gpu, job_->sequence()),
      timelines_(parts.timeline, timeline_),
      completion_({.timeline = timelines_,
                   .metrics = parts.metrics,
                   .daemon_totals = parts.totals,
                   .gpu = gpu_},
                  {.break_job = [this](const absl::Status& why) { Fail(why); },
                   .measured = [this](const exec::FusedBatch& batch,
                                      uint64_t bytes) { tuning_.Measure(batch, bytes, across_); }}),
      across_(parts.config, tuning_.knobs(), *this, parts.executor, parts.pool, parts.wake),
      intake_(parts.config, completion_, gpu_, timelines_, *this),
      p2p_(std::in_place, parts.config, *job_, completion_, parts.executor, across_, *this),
      stalls_(parts.config.stall_check_seconds, parts.config.stall_shutdown_seconds),
      next_stall_check_(Clock::now()) {}

JobRun::~JobRun() {
  for (const auto& member : job_->members()) {
    if (member) gpu_.Forget(member->id);
  }
  // gpu_'s destructor ends the job's GPU work: batches still on the GPU are
  // abandoned, on the job's own streams only.
  if (job_->state() != job::JobState::kForming) {
    observe::ReportJobEnded(*job_, completion_.totals(), parts_.metrics);
  }
  if (timeline_.active()) {
    const std::string path = timeline_.path();
    if (absl::Status stopped = timeline_.Stop(); stopped.ok()) {
      log::Daemon().info("timeline of job '{}' ended with the job: {}", job_->id(), path);
    } else {
      log::Daemon().warn("timeline of job '{}' ended with the job: {}", job_->id(),
                         stopped.message());
    }
  }
  // Messages first: the spans of removed sets they hold keep communicators
  // open, which go with the job's state across nodes. The job's segments go
  // last, with the job.
  p2p_.reset();
  across_.End(parts_.totals);
}

absl::Status JobRun::Form(const job::NodeLayout& layout, std::unique_ptr<JobWorld> world) {
  world_ = std::move(world);
  const bool across_nodes = world_ != nullptr;
  if (across_nodes) {
    // Every node reaches this point with the same layout: the groups of the
    // sets first (an MPI world's MPI_Comm_dup waits for every node), then
    // the job, whose static process sets get groups too.
    if (absl::Status begun = across_.Begin(*world_, layout); !begun.ok()) {
      world_->Break(begun, /*abandon=*/true);
      return begun;
    }
    p2p_->BeginAcrossNodes(across_.link(), world_->transport(), layout);
  }
  absl::Status formed = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const job::ResultSegmentOwner owner,
                     job::ChooseResultSegmentOwner(*job_, parts_.daemon_uid, parts_.daemon_gid));
    ASSIGN_OR_RETURN_WITH(std::unique_ptr<job::ResultArena> results,
                          job::ResultArena::Create({.name = parts_.names.Result(job_->sequence()),
                                                    .data_bytes = config_.result_arena_bytes,
                                                    .epoch = parts_.epoch,
                                                    .job_sequence = job_->sequence(),
                                                    .owner_uid = owner.uid,
                                                    .owner_gid = owner.gid,
                                                    .mode = owner.mode}),
                          "cannot create the job's result segment");
    ASSIGN_OR_RETURN_WITH(std::shared_ptr<job::JobDoorbell> doorbell,
                          job::JobDoorbell::Create({.name = parts_.names.Doorbell(job_->sequence()),
                                                    .epoch = parts_.epoch,
                                                    .job_sequence = job_->sequence(),
                                                    .owner_uid = owner.uid,
                                                    .owner_gid = owner.gid,
                                                    .mode = owner.writable_mode()}),
                          "cannot create the job's doorbell segment");
    const job::ClientRecord* first = job_->member(0);
    return job_->Form(std::move(results), std::move(doorbell), first->static_process_sets, layout);
  }();
  if (!formed.ok()) {
    if (across_nodes) {
      // This node could not form what the others did: they must hear it.
      TellOtherNodes(
          v1::JobEvent::KIND_FAILED,
          absl::UnavailableError(absl::StrCat("node ", world_->node(), " (", world_->node_name(),
                                              ") could not form the job")));
    }
    return formed;
  }
  completion_.set_results(job_->results());
  coordinator_ = std::make_unique<negotiation::Coordinator>();
  parts_.totals.set_jobs(parts_.totals.jobs() + 1);
  tuning_.Start(across_);
  StartAskedTimeline();

  const Clock::duration timeout = RegisterTimeout(config_);
  const shm::ResultSegment& segment = job_->results()->segment();
  for (const auto& member : job_->members()) {
    v1::RegisterResponse response;
    response.set_client_id(member->id);
    response.set_session_token(member->session_token);
    *response.mutable_topology() = member->topology;
    response.set_busy_threads_on_host(job_->layout().BusyThreadsOnHost());
    response.mutable_arena()->set_name(member->segment->name());
    response.mutable_arena()->set_size_bytes(member->segment->size());
    response.mutable_results()->set_name(segment.name());
    response.mutable_results()->set_size_bytes(segment.size());
    response.mutable_doorbell()->set_name(job_->doorbell()->segment().name());
    response.mutable_doorbell()->set_size_bytes(job_->doorbell()->segment().size());
    v1::Limits* limits = response.mutable_limits();
    limits->set_max_name_bytes(config_.max_name_bytes);
    limits->set_max_outstanding_requests(config_.max_outstanding_requests);
    limits->set_max_dims(job::kMaxDims);
    limits->set_fusion_threshold_bytes(config_.fusion_threshold_bytes);
    response.set_epoch(parts_.epoch);
    response.set_daemon_version(COLLECTIVE_VERSION);
    response.set_gpu_path(parts_.gpu.built());
    for (const auto& [id, set] : job_->process_sets().sets()) {
      if (id == 0) continue;
      v1::ProcessSet* described = response.add_process_sets();
      described->set_id(id);
      for (int32_t rank : set.ranks) described->add_ranks(rank);
    }
    member->attach_deadline = Clock::now() + timeout;
    member->registration->Finish(absl::OkStatus(), response);
    member->registration.reset();
  }
  observe::ReportJobStarted(*job_, parts_.metrics);
  if (!across_nodes) return absl::OkStatus();
  for (const auto& [id, set] : job_->process_sets().sets()) {
    if (absl::Status added = across_.AddSet(set); !added.ok()) {
      Fail(absl::UnavailableError(absl::StrCat("process set ", id, " of job '", job_->id(),
                                               "' across nodes: ", added.message())));
      break;
    }
  }
  return absl::OkStatus();
}

void JobRun::OnClientMessage(ClientMessageEvent& event, job::ClientRecord* client) {
  v1::ClientMessage& message = event.message;
  if (message.has_attach()) {
    Attach(event.link, event.peer, message.attach(), client);
    return;
  }
  if (client->gone) return;
  if (message.has_submit() || message.released_size() > 0 || message.copy_outs_size() > 0 ||
      message.has_cuda()) {
    // One path in: what the client sends about its requests goes through its
    // ring, where the engine reads it in order with the rest.
    Drop(*client, absl::InvalidArgumentError(absl::StrCat(
                      job::DescribeMember(*client),
                      " sent submissions, releases or CUDA registrations on its session "
                      "stream; they go through the submission ring in the client's "
                      "shared-memory segment, and the stream carries only attach and leave; "
                      "the job cannot continue")));
    return;
  }
  if (message.has_leave()) Leave(*client);
}

void JobRun::Attach(const std::shared_ptr<job::SessionLink>& link, const job::PeerCredentials& peer,
                    const v1::Attach& attach, job::ClientRecord* client) {
  if (client == nullptr || job_->state() == job::JobState::kForming ||
      !SecretsEqual(client->session_token, attach.session_token()) ||
      client->peer.uid != peer.uid) {
    RefuseSession(*link, peer, attach.client_id());
    return;
  }
  if (client->attached() || !client->live()) {
    link->Close(absl::AlreadyExistsError(
        absl::StrCat("client ", client->id, " already has (or had) a session")));
    return;
  }
  client->link = link;
  client->attached_at = absl::Now();
  v1::DaemonMessage attached;
  attached.mutable_attached()->set_client_id(client->id);
  link->Send(std::move(attached));
  if (!job_->failure().ok()) {
    v1::DaemonMessage failed;
    failed.mutable_job_failed()->set_code(static_cast<int>(job_->failure().code()));
    failed.mutable_job_failed()->set_message(std::string(job_->failure().message()));
    link->Send(std::move(failed));
  }
  log::Rpc().debug("client {} ({}) attached", client->id, job::DescribeMember(*client));
}

void JobRun::RefuseSession(job::SessionLink& link, const job::PeerCredentials& peer,
                           uint64_t client_id) {
  log::Rpc().warn("session from {} refused: unknown client {} or wrong token", peer.ToString(),
                  client_id);
  link.Close(absl::PermissionDeniedError(
      "unknown client id or wrong session token: register before opening a session"));
}

void JobRun::Leave(job::ClientRecord& client) {
  if (client.left) return;
  // What the client published before it said goodbye still counts.
  intake_.Drain(*job_, client);
  client.left = true;
  log::Coord().info("job '{}': {} left", job_->id(), job::DescribeMember(client));
  End(absl::FailedPreconditionError(
      absl::StrCat(job::DescribeMember(client), " has left job '", job_->id(),
                   "' (it shut down); no collective of this job can complete any more")));
}

void JobRun::Forget(job::ClientRecord& client) {
  client.gone = true;
  client.segment->Unlink();
  completion_.ReleaseAllResults(client);
  gpu_.Forget(client.id);
}

void JobRun::OnSessionClosed(job::ClientRecord& client) {
  Forget(client);
  if (!client.left) {
    const log::ScopedContext about({.rank = client.topology.rank()});
    log::Coord().warn("job '{}': {} disconnected without leaving", job_->id(),
                      job::DescribeMember(client));
    Fail(absl::AbortedError(absl::StrCat(
        job::DescribeMember(client), " disconnected from collectived without leaving job '",
        job_->id(), "' (it died or closed its session); the job cannot continue")));
  }
  MaybeTearDown();
}

void JobRun::RegistrationCancelled(job::ClientRecord& client) {
  // The job formed as the client went away: it will never attach.
  if (client.attached() || !client.live()) return;
  client.gone = true;
  client.segment->Unlink();
  Fail(absl::AbortedError(absl::StrCat(job::DescribeMember(client),
                                       " went away before it opened its session; job '", job_->id(),
                                       "' cannot continue")));
  MaybeTearDown();
}

void JobRun::Drop(job::ClientRecord& client, const absl::Status& why) {
  Forget(client);
  log::Coord().error("{}", why.message());
  Fail(why);
  if (client.link) client.link->Close(why);
}

void JobRun::FailUndecided(const absl::Status& why) {
  if (coordinator_ != nullptr) completion_.FailSubmissions(coordinator_->TakeAllPending(), why);
  p2p_->FailWaiting(why);
  std::vector<negotiation::ReadyTensor> local;
  for (exec::FusedBatch& batch : deferred_) {
    for (negotiation::ReadyTensor& tensor : batch.tensors) local.push_back(std::move(tensor));
  }
  deferred_.clear();
  completion_.FailReady(std::move(local), why);
  // Node 0 fails what it still waits for, now and when announced later.
  across_.Fail(why);
}

void JobRun::AbandonDecided(const absl::Status& why) {
  completion_.FailReady(across_.Abandon(), why);
  p2p_->Abandon(why);
}

void JobRun::End(const absl::Status& why, Origin origin) {
  const bool first = job_->failure().ok();
  job_->End(why);
  FailUndecided(job_->failure());
  if (first && origin == Origin::kHere) TellOtherNodes(v1::JobEvent::KIND_ENDED, why);
}

void JobRun::Fail(const absl::Status& why, Origin origin) {
  const bool first = job_->state() != job::JobState::kFailed;
  job_->Fail(why);
  // Across nodes, what node 0 decided (or decides before it hears of this)
  // for tensors every rank submitted still runs on every node, so that
  // their transfers pair up and MPI stays in step for the next job: only
  // what is not decided fails now. Once the world is lost (a node died),
  // nothing decided can finish either: not its transfers, nor the parts of
  // small allreduces that node would have sent.
  FailUndecided(job_->failure());
  if (world_ != nullptr && world_->lost()) AbandonDecided(job_->failure());
  // NCCL kernels of work on the GPU may wait for a rank that will never
  // come: abort them rather than hang.
  if (gpu_.in_flight() > 0) gpu_.EndJob();
  if (!first) return;
  log::Coord().warn("job '{}' failed: {}", job_->id(), job_->failure().message());
  if (origin == Origin::kHere) TellOtherNodes(v1::JobEvent::KIND_FAILED, why);
  v1::DaemonMessage message;
  message.mutable_job_failed()->set_code(static_cast<int>(job_->failure().code()));
  message.mutable_job_failed()->set_message(std::string(job_->failure().message()));
  for (const auto& member : job_->members()) {
    if (member && member->link && member->live()) member->link->Send(message);
  }
}

void JobRun::Shutdown(const absl::Status& status) {
  // Transfers this daemon began with the others will not finish.
  if (across_.view().unfinished()) world_->Break(status, /*abandon=*/true);
  Fail(status);
  for (const auto& member : job_->members()) {
    if (member && member->link) member->link->Close(status);
  }
  done_ = true;
}

void JobRun::MaybeTearDown() {
  if (job_->state() == job::JobState::kForming || !job_->finished()) return;
  // A job across nodes first finishes what node 0 decided (see Fail), and
  // the messages whose bytes move (MPI writes into its segments).
  if (across_.view().unfinished() || p2p_->moving()) return;
  done_ = true;
}

void JobRun::TellOtherNodes(v1::JobEvent::Kind kind, const absl::Status& why) {
  if (!across_.view().active()) return;
  v1::JobEvent event;
  event.set_kind(kind);
  event.set_code(static_cast<int32_t>(why.code()));
  event.set_message(std::string(why.message()));
  event.set_daemon_stopping(world_->stopping());
  event.set_node_lost(world_->broken() && world_->abandoned());
  if (absl::Status told = across_.Tell(event); !told.ok()) {
    log::Mpi().warn("could not tell the other nodes: {}", told.message());
  }
}

void JobRun::OnJobEvent(int from, const v1::JobEvent& event) {
  const absl::Status why(
      static_cast<absl::StatusCode>(event.code()),
      absl::StrCat("on ", AcrossNodes::DescribeNode(job_.get(), from), ": ", event.message()));
  if (event.daemon_stopping() || event.node_lost()) {
    // A daemon that stops will not finish the work it was deciding with us.
    world_->Break(why, /*abandon=*/event.node_lost() || across_.view().unfinished());
  }
  if (job_->state() == job::JobState::kForming) return;
  if (event.kind() == v1::JobEvent::KIND_ENDED) {
    End(why, Origin::kOtherNode);
  } else {
    Fail(why, Origin::kOtherNode);
  }
}

void JobRun::LostOtherNodes(const absl::Status& why) {
  const absl::Status lost = absl::UnavailableError(
      absl::StrCat("the daemons of job '", job_->id(), "' lost each other: ", why.message()));
  world_->Break(lost, /*abandon=*/true);
  Fail(lost);
}

void JobRun::AbandonWorld(const absl::Status& why) { world_->Break(why, /*abandon=*/true); }

void JobRun::BreakAndFail(const absl::Status& why) {
  world_->Break(why, /*abandon=*/true);
  Fail(why);
}

void JobRun::KeepPollingFast() {
  fast_poll_until_ = Clock::now() + 2 * std::chrono::milliseconds(tuning_.knobs().cycle_time_ms);
}

bool JobRun::PollOtherNodes(Clock::time_point now) {
  if (!across_.view().active() || world_->abandoned()) return false;
  // The job ended here with nothing left to finish: the other daemons
  // leaving its world is its end too, not a failure.
  const bool settled = job_->ended() && !across_.view().unfinished();
  if (settled && world_->broken()) return false;
  absl::StatusOr<AcrossNodes::Heard> heard = across_.Poll(now);
  if (!heard.ok()) {
    if (settled) {
      world_->Break(heard.status(), /*abandon=*/true);
      return false;
    }
    LostOtherNodes(heard.status());
    return true;
  }
  bool worked = heard->worked;
  if (absl::StatusOr<bool> moved = p2p_->Poll(); !moved.ok()) {
    LostOtherNodes(moved.status());
    return true;
  } else {
    worked = worked || *moved;
  }
  if (worked) KeepPollingFast();
  for (const auto& [from, event] : heard->events) OnJobEvent(from, event);
  if (worked) MaybeTearDown();
  if (across_.view().active() && AcrossNodes::Decides(job_->state())) {
    if (const int silent = across_.Silent(now); silent >= 0) {
      const absl::Status why = absl::UnavailableError(
          absl::StrCat(AcrossNodes::DescribeNode(job_.get(), silent), " of job '", job_->id(),
                       "' stopped answering: its daemon sent nothing for ",
                       std::chrono::duration<double>(across_.node_timeout()).count(),
                       " s (node_timeout_seconds); it died, hangs, or the network to it failed"));
      log::Mpi().error("{}", why.message());
      BreakAndFail(why);
      worked = true;
    }
  }
  return worked;
}

bool JobRun::waits_for_decisions() const {
  if (!across_.view().active()) return false;
  return across_.WaitsForDecisions() ||
         (coordinator_ != nullptr && !coordinator_->Joined(0).empty()) || p2p_->waiting_across();
}

Clock::time_point JobRun::NextPollOfOtherNodes(Clock::time_point now) const {
  if (transferring() || now < fast_poll_until_) return now + kFastPoll;
  const Clock::time_point cycle = now + std::chrono::milliseconds(tuning_.knobs().cycle_time_ms);
  const Clock::time_point idle = now + std::chrono::milliseconds(config_.heartbeat_interval_ms);
  if (!across_.view().active()) return idle;
  // Node 0 hears from the others at any time; a node waiting for a decision
  // (or whose local ranks joined, so that node 0 may decide tensors it never
  // announced) looks every cycle; an idle one only for its heartbeat and for
  // news of failures.
  if (waits_for_decisions()) return cycle;
  return std::min(idle, across_.next_heartbeat());
}

bool JobRun::OwedByOtherNodes() const {
  return across_.view().active() &&
         (across_.AwaitsOtherNodes() || p2p_->moving() || p2p_->waiting_across());
}

void JobRun::Admitted(job::ClientRecord& client, v1::TensorRequest& request,
                      const job::ProcessSet& set) {
  if (negotiation::IsPointToPoint(request.collective())) {
    p2p_->Add(client, request, set);
    return;
  }
  const uint64_t request_id = request.request_id();
  const int32_t local_members = across_.LocalMembers(set);
  const bool join = request.collective() == v1::COLLECTIVE_JOIN;
  client.outstanding[request_id] = request.length();
  client.bytes_submitted += request.length();
  const int32_t set_rank = set.RankOf(client.topology.rank());
  const int32_t set_id = request.process_set_id();
  const absl::Status status =
      coordinator_->Add(negotiation::Submission{.client = &client,
                                                .set_rank = set_rank,
                                                .rank = client.topology.rank(),
                                                .request = std::move(request),
                                                .at = Clock::now()},
                        set.size(), local_members);
  if (!status.ok()) {
    completion_.CompleteWithError(client, request_id, status);
    return;
  }
  if (join) {
    // Across nodes node 0 says when the set begins refusing (Decide), so
    // that every node names the same first rank.
    if (!across_.SpansNodes(set)) {
      completion_.FailRefused(coordinator_->RefuseAfterJoin(set_id, set_rank));
    }
    coordinator_->Join(set_id, set_rank, set.size());
    across_.AnnounceJoin(set, set_rank);
  }
}

void JobRun::RefuseAfterJoin(int32_t process_set_id, int32_t first_joined) {
  completion_.FailRefused(coordinator_->RefuseAfterJoin(process_set_id, first_joined));
}

bool JobRun::RunReady() {
  if (coordinator_ == nullptr) return false;
  std::vector<negotiation::ReadyTensor> ready = coordinator_->TakeReady();
  // Matched messages run among this node's ranks only (PointToPoint sends
  // the others across nodes itself): nothing to announce to node 0.
  std::vector<negotiation::ReadyTensor> messages = p2p_->TakeMatched();
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
    completion_.RecordNegotiation(tensor);
    if (absl::Status status = CheckReady(tensor, CheckScope::kThisNode); !status.ok()) {
      const log::ScopedContext about({.tensor = tensor.name});
      log::Coord().warn("{}", status.message());
      completion_.FailTensor(tensor, status);
    } else if (!negotiation::CarriesData(tensor.request().collective())) {
      RunControl(tensor);
    } else {
      data.push_back(std::move(tensor));
    }
  }
  for (exec::FusedBatch& batch :
       exec::PlanFusion(std::move(data), tuning_.knobs().fusion_threshold_bytes)) {
    deferred_.push_back(std::move(batch));
  }
  return RunDeferred() || ran;
}

bool JobRun::RunDeferred() {
  bool ran = false;
  while (!deferred_.empty() && job_->state() == job::JobState::kRunning) {
    if (deferred_.front().tensors.front().request().memory() == v1::MEMORY_KIND_CUDA) {
      if (!RunDeviceBatch()) return ran;  // a release will make room
      ran = true;
      continue;
    }
    exec::Executor::Outcome outcome = parts_.executor.Run(deferred_.front(), *job_->results());
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
    completion_.CompleteBatch(batch, run);
  }
  return ran;
}

void JobRun::RunControl(const negotiation::ReadyTensor& tensor) {
  const v1::TensorRequest& request = tensor.request();
  const v1::Collective collective = request.collective();
  switch (collective) {
    case v1::COLLECTIVE_BARRIER:
      completion_.CompleteControl(tensor, 0);
      return;
    case v1::COLLECTIVE_JOIN:
      coordinator_->EndJoin(tensor.process_set_id);
      completion_.CompleteControl(tensor, tensor.completed_by);
      return;
    case v1::COLLECTIVE_ADD_PROCESS_SET: {
      const auto& ranks = request.process_set_ranks();
      const auto id = job_->process_sets().Add(
          std::span<const int32_t>(ranks.data(), static_cast<size_t>(ranks.size())));
      if (!id.ok()) {
        completion_.FailTensor(tensor, id.status());
        return;
      }
      const job::ProcessSet& added = *job_->process_sets().Find(*id);
      // Across nodes, every node runs this decision at the same point of
      // the order: the set's nodes create its communicator together.
      if (absl::Status made = across_.AddSet(added); !made.ok()) {
        completion_.FailTensor(tensor, made);
        Fail(absl::UnavailableError(absl::StrCat("process set ", *id, " of job '", job_->id(),
                                                 "' across nodes: ", made.message())));
        return;
      }
      log::Coord().info("job '{}': process set {} {} added", job_->id(), *id,
                        job::RanksString(added.ranks));
      completion_.CompleteControl(tensor, *id);
      return;
    }
    case v1::COLLECTIVE_REMOVE_PROCESS_SET: {
      const int32_t id = request.target_process_set_id();
      if (absl::Status removed = job_->process_sets().Remove(id); !removed.ok()) {
        completion_.FailTensor(tensor, removed);
        return;
      }
      const absl::Status removed_why =
          absl::CancelledError(absl::StrCat("process set ", id, " was removed"));
      completion_.FailSubmissions(coordinator_->TakePending(id), removed_why);
      p2p_->RemoveSet(id, removed_why);
      across_.RemoveSet(id);
      log::Coord().info("job '{}': process set {} removed", job_->id(), id);
      completion_.CompleteControl(tensor, id);
      return;
    }
    default:
      completion_.FailTensor(
          tensor, absl::InternalError(absl::StrCat("no way to run ", CollectiveName(collective))));
  }
}

void JobRun::RunOnDevice(std::vector<exec::FusedBatch> batches) {
  for (exec::FusedBatch& batch : batches) deferred_.push_back(std::move(batch));
  RunDeferred();
}

void JobRun::RegisterCuda(job::ClientRecord& client, const v1::RegisterCuda& message) {
  const absl::Status status = gpu_.Register(client.id, message);
  if (!status.ok()) {
    log::Nccl().warn("{}: CUDA registration refused: {}", job::DescribeMember(client),
                     status.message());
  }
  if (client.link == nullptr) return;
  v1::DaemonMessage answer;
  v1::CudaRegistered* registered = answer.mutable_cuda_registered();
  registered->set_registration_id(message.registration_id());
  registered->set_code(static_cast<int>(status.code()));
  registered->set_message(std::string(status.message()));
  client.link->Send(std::move(answer));
}

bool JobRun::RunDeviceBatch() {
  uint64_t splits_bytes = 0;
  uint32_t readers = 0;
  for (const negotiation::ReadyTensor& tensor : deferred_.front().tensors) {
    if (tensor.request().collective() != v1::COLLECTIVE_ALLTOALL) continue;
    splits_bytes += SplitsBytes(tensor) * tensor.submissions.size();
    readers += static_cast<uint32_t>(tensor.submissions.size());
  }
  uint64_t block = kNoBlock;
  if (splits_bytes > 0) {
    const std::optional<uint64_t> allocated = job_->results()->Allocate(splits_bytes, readers);
    if (!allocated.has_value()) return false;
    block = *allocated;
  }
  const gpu::GpuExecutor::Outcome outcome = gpu_.Run(
      deferred_.front(),
      [this](int devices, const gpu::NewUniqueId& new_id) -> absl::StatusOr<gpu::GlobalLayout> {
        if (world_ != nullptr) return world_->ShareNcclLayout(devices, new_id);
        // A job of one node: its devices are the communicator's.
        ASSIGN_OR_RETURN(std::string unique_id, new_id());
        return gpu::GlobalLayout{.ranks = devices, .first_rank = 0, .unique_id = unique_id};
      });
  const exec::FusedBatch batch = std::move(deferred_.front());
  deferred_.pop_front();
  BatchRun run{.where = BatchRun::Where::kDevice};
  run.outcome.status = outcome.status;
  run.outcome.started = outcome.started;
  run.outcome.finished = Clock::now();
  run.breaks_job = outcome.broken;
  run.device_batch = outcome.batch;
  run.splits_block = block;
  if (!outcome.status.ok()) {
    if (block != kNoBlock) job_->results()->Discard(block);
    log::Nccl().error("{}", outcome.status.message());
  }
  completion_.CompleteBatch(batch, run);
  return true;
}

void JobRun::Finished(exec::FusedBatch batch, exec::Executor::Outcome outcome,
                      std::unique_ptr<exec::CrossNodeRun> cross, absl::Status status) {
  BatchRun run{.where = BatchRun::Where::kAcrossNodes, .outcome = std::move(outcome)};
  exec::Executor::Outcome& ran = run.outcome;
  // The timeline shows the local part up to the first transfer, then the
  // transfers (CROSS_NODE) to the end.
  run.transferred_at = Clock::now();
  run.transferred = cross->bytes();
  ran.started = cross->started();
  ran.finished = cross->transfers_started() == Clock::time_point{} ? run.transferred_at
                                                                   : cross->transfers_started();
  if (!status.ok()) {
    const absl::Status why = absl::UnavailableError(absl::StrCat(
        "job '", job_->id(), "' could not exchange data across nodes: ", status.message()));
    log::Mpi().error("{}", why.message());
    // The run's transfers may be half done on other nodes: MPI cannot be
    // trusted with this world any more, and the result block stays MPI's.
    world_->Break(why, /*abandon=*/true);
    (void)cross.release();
    ran.status = why;
    run.breaks_job = true;
    completion_.CompleteBatch(batch, run);
    return;
  }
  parts_.executor.CheckFaults(batch, *job_->results(), ran);
  size_t readers = 0;
  for (const negotiation::ReadyTensor& tensor : batch.tensors) readers += tensor.submissions.size();
  if (ran.status.ok() && readers == 0) job_->results()->Release(ran.block);
  run.breaks_job = !ran.corrupted.empty() || ran.results_lost;
  completion_.CompleteBatch(batch, run);
}

void JobRun::RunTimers(Clock::time_point now) {
  if (job_->state() == job::JobState::kForming) return;
  if (now >= next_stall_check_) {
    CheckStalls(now);
    // Fine enough for limits given in seconds.
    next_stall_check_ = now + std::chrono::seconds(1);
  }
  CheckAttachDeadlines(now);
  CheckGpu(now);
  MaybeTearDown();
}

Clock::time_point JobRun::NextTimer(Clock::time_point now, Clock::time_point next) const {
  if (stalls_.enabled() && coordinator_ != nullptr && !coordinator_->idle()) {
    next = std::min(next, next_stall_check_);
  }
  if (job_->state() == job::JobState::kForming) return std::min(next, job_->formation_deadline());
  for (const job::Job::WaitingRegistration& waiting : job_->waiting()) {
    next = std::min(next, waiting.deadline);
  }
  for (const auto& member : job_->members()) {
    if (member && !member->attached() && member->live()) {
      next = std::min({next, member->attach_deadline, now + kAttachLivenessPoll});
    }
  }
  return next;
}

void JobRun::CheckAttachDeadlines(Clock::time_point now) {
  for (const auto& member : job_->members()) {
    if (!member || member->attached() || !member->live()) continue;
    // Between its registration's answer and its session, a client's death
    // closes nothing the daemon holds: look for it, so that the other ranks
    // hear of it now rather than at the deadline.
    const bool ended = job::PeerProcessEnded(member->peer.pid);
    if (!ended && now < member->attach_deadline) continue;
    member->gone = true;
    member->segment->Unlink();
    Fail(absl::UnavailableError(
        ended ? absl::StrCat(job::DescribeMember(*member), " registered with job '", job_->id(),
                             "' but exited before opening its session; the job cannot continue")
              : absl::StrCat(job::DescribeMember(*member), " registered with job '", job_->id(),
                             "' but did not open its session within ",
                             config_.register_timeout_seconds, " s; the job cannot continue")));
  }
}

void JobRun::CheckGpu(Clock::time_point now) {
  if (gpu_.in_flight() == 0 || job_->state() != job::JobState::kRunning) {
    return;
  }
  const absl::Status health = gpu_.Health(now);
  if (health.ok()) return;
  log::Nccl().error("job '{}': {}", job_->id(), health.message());
  Fail(health);
}

void JobRun::WriteHeartbeats(uint64_t now_ns) {
  for (const auto& member : job_->members()) {
    if (member && member->live() && member->segment != nullptr) {
      member->segment->header()->daemon_heartbeat_ns.store(now_ns, std::memory_order_relaxed);
    }
  }
}

void JobRun::StartAskedTimeline() {
  // Horovod writes HOROVOD_TIMELINE on rank 0 alone: here the daemon of
  // global rank 0 does, as that rank.
  for (const auto& member : job_->members()) {
    if (!member || member->topology.rank() != 0 || !member->registration) continue;
    const v1::RegisterRequest& request = member->registration->request();
    if (request.timeline_path().empty()) return;
    if (parts_.timeline.active() && parts_.timeline.path() == request.timeline_path()) {
      return;  // a private daemon that took the job's HOROVOD_TIMELINE records it already
    }
    absl::Status started = parts_.check_timeline_path(request.timeline_path());
    if (started.ok()) {
      started =
          timeline_.Start(request.timeline_path(), request.timeline_mark_cycles(), member->peer);
    }
    if (started.ok()) {
      log::Daemon().info("timeline of job '{}' started (HOROVOD_TIMELINE of rank 0): {}",
                         job_->id(), request.timeline_path());
      PublishTimelineState();
    } else {
      log::Daemon().warn("job '{}' runs without the timeline its rank 0 asked for: {}", job_->id(),
                         started.message());
    }
    return;
  }
}

void JobRun::PublishTimelineState() {
  const uint32_t active = timelines_.active() ? 1 : 0;
  for (const auto& member : job_->members()) {
    if (member && member->live() && member->segment != nullptr) {
      member->segment->header()->timeline_active.store(active, std::memory_order_relaxed);
    }
  }
}

void JobRun::AttachedClients(std::vector<shm::ClientSegmentHeader*>& out) const {
  for (const auto& member : job_->members()) {
    if (member && member->attached() && member->live()) out.push_back(member->segment->header());
  }
}

std::vector<negotiation::WaitingTensor> JobRun::AllWaiting(bool with_announced) const {
  const job::NodeLayout& layout = job_->layout();
  std::vector<negotiation::WaitingTensor> local = coordinator_->Waiting(
      job_->process_sets(), [&](int32_t rank) { return layout.IsLocal(rank); });
  const AcrossNodes::View view = across_.view();
  if (!view.active()) return local;
  // Node 0 knows which nodes announced a tensor; this node's own table
  // knows which of its ranks submitted one it has not announced.
  std::vector<negotiation::WaitingTensor> waiting =
      view.Waiting(job_->process_sets(), Clock::now());
  for (negotiation::WaitingTensor& mine : local) {
    auto across =
        std::find_if(waiting.begin(), waiting.end(), [&](const negotiation::WaitingTensor& w) {
          return w.process_set_id == mine.process_set_id && w.name == mine.name;
        });
    if (across == waiting.end()) {
      waiting.push_back(std::move(mine));
      continue;
    }
    for (int32_t rank : mine.ready_ranks) {
      std::erase(across->missing_ranks, rank);
      across->ready_ranks.push_back(rank);
    }
    std::sort(across->ready_ranks.begin(), across->ready_ranks.end());
  }
  if (with_announced && !view.coordinator()) {
    for (negotiation::WaitingTensor& announced : view.Announced()) {
      waiting.push_back(std::move(announced));
    }
  }
  negotiation::SortOldestFirst(waiting);
  return waiting;
}

void JobRun::ReportPartialToNodeZero(Clock::time_point now) {
  if (!across_.view().active() || across_.view().coordinator() || !stalls_.enabled()) return;
  const job::NodeLayout& layout = job_->layout();
  std::vector<v1::PartialTensor> partial;
  for (const negotiation::WaitingTensor& waiting : coordinator_->Waiting(
           job_->process_sets(), [&](int32_t rank) { return layout.IsLocal(rank); })) {
    const job::ProcessSet* set = job_->process_sets().Find(waiting.process_set_id);
    // Half the stall time: node 0 knows by the time its own check fires.
    if (set == nullptr || !across_.SpansNodes(*set) ||
        now - waiting.first_at < stalls_.check_after() / 2) {
      continue;
    }
    v1::PartialTensor& tensor = partial.emplace_back();
    tensor.set_process_set_id(waiting.process_set_id);
    tensor.set_name(waiting.name);
    for (int32_t rank : waiting.ready_ranks) tensor.add_ranks(rank);
    tensor.set_age_seconds(std::chrono::duration<double>(now - waiting.first_at).count());
  }
  if (partial.empty() && !reported_partial_) return;
  reported_partial_ = !partial.empty();
  across_.ReportPartial(std::move(partial));
}

void JobRun::CheckStalls(Clock::time_point now) {
  if (coordinator_ == nullptr || job_->state() != job::JobState::kRunning) return;
  ReportPartialToNodeZero(now);
  for (const negotiation::StalledTensor& stalled :
       stalls_.Inspect(now, AllWaiting(/*with_announced=*/false))) {
    const absl::Status why = absl::DeadlineExceededError(stalls_.ShutdownMessage(stalled));
    std::vector<negotiation::PendingTensor> failed =
        coordinator_->TakeTensor(stalled.process_set_id, stalled.name);
    const bool across = across_.FailStalled(stalled.process_set_id, stalled.name, why);
    if (failed.empty() && !across) continue;
    const log::ScopedContext about({.tensor = stalled.name});
    log::Coord().error("{}", why.message());
    completion_.FailSubmissions(std::move(failed), why);
  }
  stalls_.InspectMessages(now, p2p_->Waiting());
}

}  // namespace collective::daemon::engine
