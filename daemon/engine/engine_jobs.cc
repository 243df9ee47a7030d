// Engine: the life of a job — registration and formation, sessions attaching,
// ranks leaving or dying, failure, and teardown.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/build_config.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/engine/engine.h"
#include "daemon/job/request_validator.h"
#include "daemon/job/secrets.h"
#include "daemon/observe/job_report.h"
#include "shm/segment_layout.h"

namespace collective::daemon::engine {
namespace {

std::string DescribeSets(const std::vector<std::vector<int32_t>>& sets) {
  if (sets.empty()) return "none";
  std::string text;
  for (const auto& set : sets)
    absl::StrAppend(&text, text.empty() ? "" : ", ", job::RanksString(set));
  return text;
}

constexpr int32_t kMaxLocalSize = 4096;
constexpr size_t kMaxJobIdBytes = 128;

Clock::duration RegisterTimeout(const config::DaemonConfig& config) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(config.register_timeout_seconds));
}

std::string JobIdOf(const v1::RegisterRequest& request) {
  return request.job_id().empty() ? "default" : request.job_id();
}

}  // namespace

absl::Status Engine::CheckRequest(const v1::RegisterRequest& request,
                                  const std::string& job_id) const {
  if (shutting_down_) {
    return absl::UnavailableError(
        absl::StrCat("collectived is shutting down (", shutdown_reason_, ")"));
  }
  if (request.layout_version() != shm::kLayoutVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("the client speaks shared-memory layout version ", request.layout_version(),
                     " but this daemon speaks version ", shm::kLayoutVersion,
                     "; use a client library that matches collectived ", COLLECTIVE_VERSION));
  }
  if (request.local_size() < 1 || request.local_size() > kMaxLocalSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("local_size ", request.local_size(), " is outside [1, ", kMaxLocalSize, "]"));
  }
  if (request.local_rank() < 0 || request.local_rank() >= request.local_size()) {
    return absl::InvalidArgumentError(absl::StrCat("local_rank ", request.local_rank(),
                                                   " is outside [0, local_size ",
                                                   request.local_size(), ")"));
  }
  if (job_id.size() > kMaxJobIdBytes || std::any_of(job_id.begin(), job_id.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      })) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job id must be at most ", kMaxJobIdBytes, " printable bytes"));
  }
  if (request.arena_bytes() > config_.max_arena_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("an arena of ", request.arena_bytes(),
                                                   " bytes exceeds max_arena_bytes (",
                                                   config_.max_arena_bytes, ")"));
  }
  return absl::OkStatus();
}

absl::Status Engine::CheckAgainstJob(const v1::RegisterRequest& request, const std::string& job_id,
                                     const std::vector<std::vector<int32_t>>& static_sets) const {
  if (job_ == nullptr) return absl::OkStatus();
  if (job_->id() != job_id) {
    return absl::UnavailableError(absl::StrCat("collectived is serving job '", job_->id(),
                                               "'; job '", job_id,
                                               "' can register when it has ended"));
  }
  if (job_->state() != job::JobState::kForming) {
    return absl::AlreadyExistsError(absl::StrCat("job '", job_id, "' is already running with all ",
                                                 job_->local_size(), " local ranks"));
  }
  if (request.local_size() != job_->local_size()) {
    const job::ClientRecord* first = nullptr;
    for (const auto& member : job_->members()) {
      if (member) {
        first = member.get();
        break;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("local_size mismatch for job '", job_id, "': local rank ", first->local_rank,
                     " (pid ", first->peer.pid, ") registered with local_size ", job_->local_size(),
                     ", this client says ", request.local_size()));
  }
  if (const job::ClientRecord* taken = job_->member(request.local_rank())) {
    return absl::AlreadyExistsError(absl::StrCat("local rank ", request.local_rank(), " of job '",
                                                 job_id, "' is already registered by pid ",
                                                 taken->peer.pid));
  }
  for (const auto& member : job_->members()) {
    if (member && member->static_process_sets != static_sets) {
      return absl::InvalidArgumentError(
          absl::StrCat("static process sets mismatch for job '", job_id, "': local rank ",
                       member->local_rank, " asked for ", DescribeSets(member->static_process_sets),
                       ", this client asks for ", DescribeSets(static_sets)));
    }
    if (member) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<job::ClientRecord>> Engine::NewClient(
    const job::RegisterCall& call) {
  const v1::RegisterRequest& request = call.request();
  auto client = std::make_unique<job::ClientRecord>();
  client->id = next_client_id_++;
  client->session_token = job::NewSessionToken();
  client->peer = call.peer();
  client->reported_pid = request.pid();
  client->local_rank = request.local_rank();
  client->registered_at = absl::Now();
  const uint64_t arena_bytes =
      request.arena_bytes() == 0 ? config_.default_arena_bytes : request.arena_bytes();
  ASSIGN_OR_RETURN_WITH(
      client->segment,
      shm::ClientSegment::Create({.name = names_.Client(client->id),
                                  .arena_bytes = arena_bytes,
                                  // Room for every outstanding completion plus
                                  // the refusals of a client that exceeds it.
                                  .ring_capacity = 2 * config_.max_outstanding_requests,
                                  // Room for the texts of that many failures
                                  // of a typical length, before they are read.
                                  .text_bytes = uint64_t{config_.max_outstanding_requests} * 256,
                                  .submit_bytes = uint64_t{config_.max_outstanding_requests} * 128,
                                  .epoch = epoch_,
                                  .client_id = client->id,
                                  .client_pid = client->peer.pid,
                                  .owner_uid = client->peer.uid,
                                  .owner_gid = client->peer.gid}),
      "cannot create the client's shared-memory segment");
  client->ring = std::make_unique<shm::RingPublisher>(*client->segment);
  client->submissions = std::make_unique<shm::SubmissionReader>(
      client->segment->header(), client->segment->submit_ring(), client->segment->submit_bytes());
  client->guard = job::GuardedRange(client->segment->header(), client->segment->size());
  client->segment->header()->timeline_active.store(timeline_.active() ? 1 : 0,
                                                   std::memory_order_relaxed);
  if (!client->guard.guarded()) {
    log::Shm().warn("no SIGBUS guard slot left for client {}; a truncated segment would crash",
                    client->id);
  }
  return client;
}

void Engine::OnRegister(const RegisterEvent& event) {
  Register(event.call, Clock::now() + RegisterTimeout(config_));
}

void Engine::Register(std::shared_ptr<job::RegisterCall> call, Clock::time_point deadline) {
  const v1::RegisterRequest& request = call->request();
  const std::string job_id = JobIdOf(request);
  // Static sets compare as sets of ranks, in the order the clients list them.
  std::vector<std::vector<int32_t>> static_sets;
  for (const v1::ProcessSet& set : request.static_process_sets()) {
    std::vector<int32_t> ranks(set.ranks().begin(), set.ranks().end());
    std::sort(ranks.begin(), ranks.end());
    static_sets.push_back(std::move(ranks));
  }
  absl::Status status = CheckRequest(request, job_id);
  if (status.ok() && job_ != nullptr && job_->ended()) {
    // The ended job goes as soon as its last member leaves, which may be
    // moments away: refusing would fail a rank that initialises again
    // sooner than the others shut down.
    log::Coord().info("job '{}': local rank {} ({}) waits for job '{}' to end", job_id,
                      request.local_rank(), call->peer().ToString(), job_->id());
    job_->waiting().push_back({std::move(call), deadline});
    return;
  }
  if (status.ok()) status = CheckAgainstJob(request, job_id, static_sets);
  if (!status.ok()) {
    log::Rpc().warn("registration from {} refused: {}", call->peer().ToString(), status.message());
    call->Finish(status, {});
    return;
  }
  auto client = NewClient(*call);
  if (!client.ok()) {
    log::Shm().error("registration from {}: {}", call->peer().ToString(),
                     client.status().message());
    call->Finish(client.status(), {});
    return;
  }
  if (job_ == nullptr) {
    job_ = std::make_unique<job::Job>(job_id, request.local_size(), next_job_sequence_++, deadline);
    log::Coord().info("job '{}' forming: {} local ranks expected", job_id, request.local_size());
  }
  registrations_[call->id()] = (*client)->id;
  log::Coord().info("job '{}': local rank {} registered ({}, client {})", job_id,
                    request.local_rank(), call->peer().ToString(), (*client)->id);
  (*client)->registration = std::move(call);
  (*client)->static_process_sets = std::move(static_sets);
  job_->AddMember(std::move(*client));
  WriteHeartbeats();
  if (job_->complete()) FormJob();
}

void Engine::ExpireWaitingRegistrations(Clock::time_point now) {
  std::vector<job::Job::WaitingRegistration>& waiting = job_->waiting();
  for (auto it = waiting.begin(); it != waiting.end();) {
    if (now < it->deadline) {
      ++it;
      continue;
    }
    const std::string job_id = JobIdOf(it->call->request());
    const std::string ended = job_id == job_->id()
                                  ? std::string("its previous run has ended")
                                  : absl::StrCat("collectived's job '", job_->id(), "' has ended");
    const std::string still_in = DescribeStillIn(*job_);
    const absl::Status late = absl::DeadlineExceededError(absl::StrCat(
        "job '", job_id, "' did not form within ", config_.register_timeout_seconds, " s: ", ended,
        still_in.empty() ? ", but its transfers with the other nodes have not finished"
                         : absl::StrCat(", but ", still_in, " not left it"),
        job_id == job_->id() ? " (each rank must shut down first)" : ""));
    log::Coord().warn("{}", late.message());
    it->call->Finish(late, {});
    it = waiting.erase(it);
  }
}

void Engine::FormJob() {
  if (!world_broken_.ok()) {
    AbortFormation(world_broken_);
    return;
  }
  if (world_->single()) {
    FinishFormation(job::NodeLayout::Single(job_->local_size()));
    return;
  }
  StartExchange();
}

void Engine::FinishFormation(const job::NodeLayout& layout) {
  auto owner = job::ChooseResultSegmentOwner(*job_, daemon_uid_, daemon_gid_);
  if (!owner.ok()) {
    AbortFormation(owner.status());
    return;
  }
  auto results = job::ResultArena::Create({.name = names_.Result(job_->sequence()),
                                           .data_bytes = config_.result_arena_bytes,
                                           .epoch = epoch_,
                                           .job_sequence = job_->sequence(),
                                           .owner_uid = owner->uid,
                                           .owner_gid = owner->gid,
                                           .mode = owner->mode});
  if (!results.ok()) {
    AbortFormation(Annotate(results.status(), "cannot create the job's result segment"));
    return;
  }
  auto doorbell = job::JobDoorbell::Create({.name = names_.Doorbell(job_->sequence()),
                                            .epoch = epoch_,
                                            .job_sequence = job_->sequence(),
                                            .owner_uid = owner->uid,
                                            .owner_gid = owner->gid,
                                            .mode = owner->writable_mode()});
  if (!doorbell.ok()) {
    AbortFormation(Annotate(doorbell.status(), "cannot create the job's doorbell segment"));
    return;
  }
  const job::ClientRecord* first = job_->member(0);
  if (absl::Status formed =
          job_->Form(std::move(*results), std::move(*doorbell), first->static_process_sets, layout);
      !formed.ok()) {
    AbortFormation(formed);
    return;
  }
  coordinator_ = std::make_unique<negotiation::Coordinator>();
  messages_ = std::make_unique<negotiation::MessageMatcher>();
  totals_.set_jobs(totals_.jobs() + 1);
  StartTuning();

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
    response.set_epoch(epoch_);
    response.set_daemon_version(COLLECTIVE_VERSION);
    response.set_gpu_path(gpu_.built());
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
  observe::ReportJobStarted(*job_, metrics_);
}

void Engine::AbortFormation(const absl::Status& status) {
  observe::ReportJobNotFormed(*job_, status, metrics_);
  for (const auto& member : job_->members()) {
    if (member && member->registration) member->registration->Finish(status, {});
  }
  registrations_.clear();
  job_.reset();
}

void Engine::OnRegisterCancelled(const RegisterCancelledEvent& event) {
  if (job_ != nullptr) {
    std::vector<job::Job::WaitingRegistration>& waiting = job_->waiting();
    auto gave_up = std::find_if(waiting.begin(), waiting.end(), [&](const auto& registration) {
      return registration.call->id() == event.call_id;
    });
    if (gave_up != waiting.end()) {
      gave_up->call->Finish(absl::CancelledError("registration cancelled by the client"), {});
      waiting.erase(gave_up);
      return;
    }
  }
  auto it = registrations_.find(event.call_id);
  if (it == registrations_.end() || job_ == nullptr) return;
  job::ClientRecord* client = job_->FindClient(it->second);
  registrations_.erase(it);
  if (client == nullptr) return;
  if (job_->state() == job::JobState::kForming) {
    log::Coord().info("job '{}': local rank {} ({}) gave up registering", job_->id(),
                      client->local_rank, client->peer.ToString());
    client->registration->Finish(absl::CancelledError("registration cancelled by the client"), {});
    job_->RemoveMember(client->local_rank);  // unlinks its segment
    if (job_->empty()) {
      log::Coord().info("job '{}' has no registered ranks left; idle", job_->id());
      job_.reset();
    }
    return;
  }
  // The job formed as the client went away: it will never attach.
  if (client->attached() || !client->live()) return;
  client->gone = true;
  client->segment->Unlink();
  FailJob(absl::AbortedError(absl::StrCat(job::DescribeMember(*client),
                                          " went away before it opened its session; job '",
                                          job_->id(), "' cannot continue")));
  MaybeTearDownJob();
}

void Engine::OnAttach(const std::shared_ptr<job::SessionLink>& link,
                      const job::PeerCredentials& peer, const v1::Attach& attach) {
  job::ClientRecord* client = job_ == nullptr ? nullptr : job_->FindClient(attach.client_id());
  if (client == nullptr || job_->state() == job::JobState::kForming ||
      !job::TokensEqual(client->session_token, attach.session_token()) ||
      client->peer.uid != peer.uid) {
    log::Rpc().warn("session from {} refused: unknown client {} or wrong token", peer.ToString(),
                    attach.client_id());
    link->Close(absl::PermissionDeniedError(
        "unknown client id or wrong session token: register before opening a session"));
    return;
  }
  if (client->attached() || !client->live()) {
    link->Close(absl::AlreadyExistsError(
        absl::StrCat("client ", client->id, " already has (or had) a session")));
    return;
  }
  client->link = link;
  client->attached_at = absl::Now();
  absl::erase_if(registrations_, [&](const auto& entry) { return entry.second == client->id; });
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

void Engine::OnLeave(job::ClientRecord& client) {
  if (client.left) return;
  // What the client published before it said goodbye still counts.
  DrainSubmissionRing(client);
  client.left = true;
  log::Coord().info("job '{}': {} left", job_->id(), job::DescribeMember(client));
  EndJob(absl::FailedPreconditionError(
      absl::StrCat(job::DescribeMember(client), " has left job '", job_->id(),
                   "' (it shut down); no collective of this job can complete any more")));
}

void Engine::OnSessionClosed(const SessionClosedEvent& event) {
  job::ClientRecord* client = job_ == nullptr ? nullptr : job_->FindByLink(event.link.get());
  if (client == nullptr || client->gone) {
    event.link->Close(absl::OkStatus());
    return;
  }
  client->gone = true;
  client->segment->Unlink();
  ReleaseAllResults(*client);
  ForgetDevices(*client);
  if (!client->left) {
    const log::ScopedContext about({.rank = client->topology.rank()});
    log::Coord().warn("job '{}': {} disconnected without leaving", job_->id(),
                      job::DescribeMember(*client));
    FailJob(absl::AbortedError(absl::StrCat(
        job::DescribeMember(*client), " disconnected from collectived without leaving job '",
        job_->id(), "' (it died or closed its session); the job cannot continue")));
  }
  event.link->Close(absl::OkStatus());
  MaybeTearDownJob();
}

void Engine::FailUndecided(const absl::Status& why) {
  if (coordinator_ != nullptr) FailSubmissions(coordinator_->TakeAllPending(), why);
  if (messages_ != nullptr) FailMessages(messages_->TakeAll(), why);
  // Across nodes, a message whose bytes move finishes (both daemons
  // started it); one still in the rendezvous fails.
  if (remote_messages_ != nullptr) FailMessages(remote_messages_->TakeAll(), why);
  for (negotiation::RemoteMessages::AnsweredReceive& receive : receives_waiting_space_) {
    CompleteWithError(*receive.receive.client, receive.receive.request.request_id(), why);
    if (receive.status.ok() && receive.data_follows) DrainRemoteReceive(receive);
  }
  receives_waiting_space_.clear();
  std::vector<negotiation::ReadyTensor> local;
  for (exec::FusedBatch& batch : deferred_) {
    for (negotiation::ReadyTensor& tensor : batch.tensors) local.push_back(std::move(tensor));
  }
  deferred_.clear();
  FailReady(std::move(local), why);
  // Node 0 fails what it still waits for, now and when announced later.
  across_.Fail(why);
}

void Engine::AbandonDecided(const absl::Status& why) {
  FailReady(across_.Abandon(), why);
  AbandonMessages(why);
}

void Engine::EndJob(const absl::Status& why, Origin origin) {
  const bool first = job_->failure().ok();
  job_->End(why);
  FailUndecided(job_->failure());
  if (first && origin == Origin::kHere) TellOtherNodes(v1::JobEvent::KIND_ENDED, why);
}

void Engine::FailJob(const absl::Status& why, Origin origin) {
  const bool first = job_->state() != job::JobState::kFailed;
  job_->Fail(why);
  // Across nodes, what node 0 decided (or decides before it hears of this)
  // for tensors every rank submitted still runs on every node, so that
  // their transfers pair up and MPI stays in step for the next job: only
  // what is not decided fails now. Once MPI is abandoned (a node died),
  // nothing decided can finish either.
  FailUndecided(job_->failure());
  if (world_->abandoned()) AbandonDecided(job_->failure());
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

void Engine::MaybeTearDownJob() {
  if (job_ == nullptr || job_->state() == job::JobState::kForming || !job_->finished()) return;
  // A job across nodes first finishes what node 0 decided (see FailJob), and
  // the messages whose bytes move (MPI writes into its segments).
  if (across_.view().unfinished() || !message_runs_.empty()) return;
  observe::ReportJobEnded(*job_, metrics_);
  retired_receive_spans_.clear();  // before the world's communicators go
  EndWorldJob();                   // stops the daemon if its world broke
  coordinator_.reset();
  messages_.reset();
  deferred_.clear();
  registrations_.clear();
  for (const auto& member : job_->members()) {
    if (member) ForgetDevices(*member);
  }
  gpu_.EndJob();
  gpu_rows_.clear();  // timeline rows of batches abandoned on the GPU
  std::vector<job::Job::WaitingRegistration> waiting = std::move(job_->waiting());
  job_.reset();  // unlinks every segment of the job
  for (job::Job::WaitingRegistration& registration : waiting) {
    Register(std::move(registration.call), registration.deadline);
  }
}

}  // namespace collective::daemon::engine
