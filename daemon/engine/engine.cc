#include "daemon/engine/engine.h"

#include <algorithm>
#include <ctime>
#include <future>
#include <thread>

#include <sys/prctl.h>
#include <unistd.h>

#include "collective/build_config.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/observe/job_report.h"

namespace collective::daemon::engine {
namespace {

// How often the engine looks whether a registered client that has not yet
// opened its session is still alive (only during that short window).
constexpr auto kAttachLivenessPoll = std::chrono::milliseconds(100);

size_t ReduceThreads(uint32_t configured) {
  if (configured != 0) return configured;
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<size_t>(online) : 1;
}

template <class... Handlers>
struct Overloaded : Handlers... {
  using Handlers::operator()...;
};

v1::JobState ToProto(job::JobState state) {
  switch (state) {
    case job::JobState::kForming:
      return v1::JOB_STATE_FORMING;
    case job::JobState::kRunning:
      return v1::JOB_STATE_RUNNING;
    case job::JobState::kEnding:
      return v1::JOB_STATE_ENDING;
    case job::JobState::kFailed:
      return v1::JOB_STATE_FAILED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

}  // namespace

Engine::Engine(const config::DaemonConfig& config, uint64_t epoch, std::string metrics_url,
               StopRequest stop, std::unique_ptr<gpu::DeviceBackend> devices)
    : config_(config),
      epoch_(epoch),
      daemon_uid_(::geteuid()),
      daemon_gid_(::getegid()),
      started_(Clock::now()),
      names_(daemon_uid_, config.socket, epoch),
      pool_(ReduceThreads(config.reduce_threads)),
      executor_(pool_),
      knobs_{.fusion_threshold_bytes = config.fusion_threshold_bytes,
             .cycle_time_ms = config.cycle_time_ms,
             .cross_node_chunk_bytes = config.cross_node_chunk_bytes},
      stop_(std::move(stop)),
      across_(config_, knobs_, across_host_, executor_, pool_, transport_,
              [this] { doorbell_.Ring(); }),
      stalls_(config.stall_check_seconds, config.stall_shutdown_seconds),
      metrics_(std::move(metrics_url)),
      systemd_status_(config.socket),
      gpu_(std::move(devices),
           {.max_event_slots = config.max_outstanding_requests,
            .timeout_seconds = config.gpu_timeout_seconds},
           [this](uint64_t batch) { Post(GpuDoneEvent{batch}); }) {}

Engine::~Engine() {
  if (thread_.joinable()) Shutdown("the daemon object was destroyed");
}

absl::Status Engine::Start() {
  if (!config_.timeline_file.empty()) {
    const job::PeerCredentials self{::getpid(), daemon_uid_, daemon_gid_};
    if (absl::Status started =
            timeline_.Start(config_.timeline_file, config_.timeline_mark_cycles, self);
        !started.ok()) {
      return Annotate(started, "cannot start the timeline named by timeline_file");
    }
    log::Daemon().info("timeline started: {}", config_.timeline_file);
  }
  next_heartbeat_ = Clock::now();
  next_stall_check_ = Clock::now();
  // MPI belongs to the engine thread: it joins the world before it loops,
  // and Start reports whether it could.
  std::promise<absl::Status> world;
  std::future<absl::Status> joined = world.get_future();
  thread_ = std::thread([this, &world] {
    // Its sleeps are short deadlines: the kernel's default 50 us of timer
    // slack would double them.
    ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    const absl::Status status = StartWorld();
    const bool ok = status.ok();
    world.set_value(status);
    if (ok) Loop();
  });
  absl::Status status = joined.get();
  if (!status.ok()) {
    thread_.join();
    std::lock_guard lock(mutex_);
    stopped_ = true;
  }
  return status;
}

bool Engine::Post(EngineEvent event) {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return false;
    queue_.push_back(std::move(event));
  }
  doorbell_.Ring();
  return true;
}

absl::Status Engine::Refusal() const {
  std::lock_guard lock(mutex_);
  if (stopped_because_.empty()) return absl::UnavailableError("collectived is shutting down");
  return absl::UnavailableError(
      absl::StrCat("collectived is shutting down (", stopped_because_, ")"));
}

void Engine::Shutdown(const std::string& reason, bool world_lost) {
  Post(ShutdownEvent{reason, world_lost});
  if (thread_.joinable()) thread_.join();
}

void Engine::Loop() {
  std::vector<EngineEvent> events;
  while (true) {
    // Arm before looking for work, so that work arriving after the look
    // ends the sleep below (see EngineDoorbell).
    doorbell_.Arm(AttachedClients(), job_ != nullptr ? job_->doorbell() : nullptr);
    {
      std::lock_guard lock(mutex_);
      events.swap(queue_);
    }
    bool worked = !events.empty();
    for (EngineEvent& event : events) Dispatch(event);
    events.clear();
    if (shutting_down_) {
      // Refuse new events, then answer what raced in (registrations are
      // refused, status is reported) and stop.
      std::lock_guard lock(mutex_);
      if (stopped_ && queue_.empty()) break;
      stopped_ = true;
      stopped_because_ = shutdown_reason_;
      continue;
    }
    worked = PollWorld() || worked;
    worked = DrainSubmissionRings() || worked;
    worked = across_.Advance() || worked;
    bool drained = false;
    if (RunReady()) {
      worked = true;
      drained = coordinator_ != nullptr && coordinator_->idle();
      if (timeline_.mark_cycles()) timeline_.Cycle(observe::MonotonicNanos());
    }
    // What this look announced goes out now, not a look later: the other
    // nodes (node 0 for its decision, the peers for a small allreduce's
    // parts) wait for it, and a look is a yield of the core away.
    if (across_.unsent()) worked = PollWorld() || worked;
    const Clock::time_point now = Clock::now();
    RunTimers(now);
    systemd_status_.Observe(job_.get());
    if (drained) spin_.Drained(now);
    if (worked) {
      spin_.Worked(now);
    } else if (Spins(now)) {
      std::this_thread::yield();
    } else {
      doorbell_.Sleep(NextTimer());
    }
  }
  // MPI ends on the thread that began it: the other daemons hear that this
  // one stops (they stop too), then MPI_Finalize meets them — unless MPI
  // cannot be trusted any more, when the process's exit is the clean-up.
  if (exchange_ != nullptr && exchange_->in_flight()) abandoned_.push_back(std::move(exchange_));
  exchange_.reset();
  if (!abandoned_.empty()) world_->Abandon();
  world_->AnnounceStop();
  if (world_->abandoned()) {
    (void)world_.release();
  } else {
    world_.reset();
  }
  log::Daemon().info("engine stopped");
}

bool Engine::Spins(Clock::time_point now) const {
  if (job_ == nullptr || world_->abandoned()) return false;
  const bool owed = !world_->single() && across_.view().active() &&
                    (across_.AwaitsOtherNodes() || !message_runs_.empty() ||
                     (remote_messages_ != nullptr && !remote_messages_->idle()));
  return spin_.Spins(now, owed);
}

std::vector<shm::ClientSegmentHeader*> Engine::AttachedClients() const {
  std::vector<shm::ClientSegmentHeader*> headers;
  if (job_ == nullptr) return headers;
  for (const auto& member : job_->members()) {
    if (member && member->attached() && member->live()) {
      headers.push_back(member->segment->header());
    }
  }
  return headers;
}

void Engine::Dispatch(EngineEvent& event) {
  std::visit(Overloaded{
                 [this](RegisterEvent& e) { OnRegister(e); },
                 [this](RegisterCancelledEvent& e) { OnRegisterCancelled(e); },
                 [this](ClientMessageEvent& e) { OnClientMessage(e); },
                 [this](SessionClosedEvent& e) { OnSessionClosed(e); },
                 [this](StatusEvent& e) { OnStatus(e); },
                 [this](HealthEvent& e) {
                   v1::HealthResponse response;
                   response.set_serving(!shutting_down_);
                   response.set_version(COLLECTIVE_VERSION);
                   e.reply(response);
                 },
                 [this](TimelineEvent& e) { OnTimeline(e); },
                 [this](ShutdownEvent& e) { OnShutdown(e); },
                 [this](MetricsEvent& e) { OnMetrics(e); },
                 [this](GpuDoneEvent& e) { OnGpuDone(e); },
             },
             event);
}

Clock::time_point Engine::NextTimer() const {
  Clock::time_point next = next_heartbeat_;
  if (WaitsForWorld()) next = std::min(next, NextWorldPoll());
  if (job_ == nullptr) return next;
  if (stalls_.enabled() && coordinator_ != nullptr && !coordinator_->idle()) {
    next = std::min(next, next_stall_check_);
  }
  if (job_->state() == job::JobState::kForming) return std::min(next, job_->formation_deadline());
  for (const job::Job::WaitingRegistration& waiting : job_->waiting()) {
    next = std::min(next, waiting.deadline);
  }
  for (const auto& member : job_->members()) {
    if (member && !member->attached() && member->live()) {
      next = std::min({next, member->attach_deadline, Clock::now() + kAttachLivenessPoll});
    }
  }
  return next;
}

void Engine::RunTimers(Clock::time_point now) {
  if (now >= next_heartbeat_) {
    WriteHeartbeats();
    CheckGpu(now);
    next_heartbeat_ = now + std::chrono::milliseconds(config_.heartbeat_interval_ms);
  }
  if (job_ == nullptr) return;
  if (now >= next_stall_check_) {
    CheckStalls(now);
    // Fine enough for limits given in seconds.
    next_stall_check_ = now + std::chrono::seconds(1);
  }
  ExpireWaitingRegistrations(now);
  if (job_->state() == job::JobState::kForming) {
    if (now < job_->formation_deadline()) return;
    const std::vector<int32_t> missing = job_->MissingLocalRanks();
    const absl::Status late = absl::DeadlineExceededError(
        missing.empty() ? absl::StrCat("job '", job_->id(), "' did not form within ",
                                       config_.register_timeout_seconds, " s: all ",
                                       job_->local_size(), " local ranks of node ", world_->rank(),
                                       " registered, but not every other node's ranks did")
                        : absl::StrCat("job '", job_->id(), "' did not form within ",
                                       config_.register_timeout_seconds,
                                       " s: ", job::DescribeLocalRanks(missing), " of ",
                                       job_->local_size(), " never registered"));
    if (exchange_ != nullptr) AbandonExchange(late);
    AbortFormation(late);
    return;
  }
  for (const auto& member : job_->members()) {
    if (!member || member->attached() || !member->live()) continue;
    // Between its registration's answer and its session, a client's death
    // closes nothing the daemon holds: look for it, so that the other ranks
    // hear of it now rather than at the deadline.
    const bool ended = job::PeerProcessEnded(member->peer.pid);
    if (!ended && now < member->attach_deadline) continue;
    member->gone = true;
    member->segment->Unlink();
    FailJob(absl::UnavailableError(
        ended ? absl::StrCat(job::DescribeMember(*member), " registered with job '", job_->id(),
                             "' but exited before opening its session; the job cannot continue")
              : absl::StrCat(job::DescribeMember(*member), " registered with job '", job_->id(),
                             "' but did not open its session within ",
                             config_.register_timeout_seconds, " s; the job cannot continue")));
  }
  MaybeTearDownJob();
}

std::vector<negotiation::WaitingTensor> Engine::AllWaiting(bool with_announced) const {
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

void Engine::ReportPartialToNodeZero(Clock::time_point now) {
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

void Engine::CheckStalls(Clock::time_point now) {
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
    FailSubmissions(std::move(failed), why);
  }
  stalls_.InspectMessages(now, AllWaitingMessages());
}

void Engine::DescribePending(Clock::time_point now, v1::StatusResponse& response) const {
  const Clock::duration stall_after = stalls_.check_after();
  for (const negotiation::WaitingTensor& waiting : AllWaiting(/*with_announced=*/true)) {
    v1::PendingTensor* tensor = response.add_pending();
    tensor->set_name(waiting.name);
    tensor->set_process_set_id(waiting.process_set_id);
    tensor->set_collective(waiting.collective);
    tensor->set_age_seconds(std::chrono::duration<double>(now - waiting.first_at).count());
    tensor->set_stalled(stall_after > Clock::duration::zero() &&
                        now - waiting.first_at > stall_after);
    tensor->set_waiting_for_other_nodes(waiting.across_nodes);
    for (int32_t rank : waiting.ready_ranks) tensor->add_ready_ranks(rank);
    for (int32_t rank : waiting.missing_ranks) tensor->add_missing_ranks(rank);
  }
}

void Engine::OnTimeline(const TimelineEvent& event) {
  const v1::TimelineRequest& request = event.request;
  absl::Status status;
  switch (request.action()) {
    case v1::TimelineRequest::ACTION_START:
      status = timeline_.Start(request.path(), request.mark_cycles(), event.peer);
      if (status.ok()) log::Daemon().info("timeline started: {}", request.path());
      break;
    case v1::TimelineRequest::ACTION_STOP:
      status = timeline_.Stop();
      if (status.ok()) log::Daemon().info("timeline stopped");
      break;
    default:
      status = absl::InvalidArgumentError("the timeline action must be start or stop");
  }
  PublishTimelineState();
  if (!status.ok()) {
    event.reply(status);
    return;
  }
  v1::TimelineResponse response;
  response.set_active(timeline_.active());
  response.set_path(timeline_.path());
  response.set_events_written(timeline_.events_written());
  event.reply(response);
}

void Engine::PublishTimelineState() {
  if (job_ == nullptr) return;
  const uint32_t active = timeline_.active() ? 1 : 0;
  for (const auto& member : job_->members()) {
    if (member && member->live()) {
      member->segment->header()->timeline_active.store(active, std::memory_order_relaxed);
    }
  }
}

void Engine::WriteHeartbeats() {
  if (job_ == nullptr) return;
  const uint64_t now = observe::MonotonicNanos();
  for (const auto& member : job_->members()) {
    if (member && member->live()) {
      member->segment->header()->daemon_heartbeat_ns.store(now, std::memory_order_relaxed);
    }
  }
}

void Engine::OnShutdown(const ShutdownEvent& event) {
  if (shutting_down_) return;
  shutting_down_ = true;
  shutdown_reason_ = event.reason;
  log::Daemon().info("shutting down: {}", event.reason);
  const absl::Status status =
      absl::UnavailableError(absl::StrCat("collectived is shutting down (", event.reason, ")"));
  if (event.world_lost && !world_->single()) {
    log::Mpi().info("a node of the MPI world is lost: leaving MPI without waiting for it");
    BreakWorld(status, /*abandon_mpi=*/true);
  }
  if (job_ != nullptr) {
    for (const job::Job::WaitingRegistration& waiting : job_->waiting()) {
      waiting.call->Finish(status, {});
    }
    job_->waiting().clear();
    if (job_->state() == job::JobState::kForming) {
      AbortFormation(status);
    } else {
      // Transfers this daemon began with the others will not finish.
      if (across_.view().unfinished()) BreakWorld(status, /*abandon_mpi=*/true);
      FailJob(status);
      for (const auto& member : job_->members()) {
        if (member && member->link) member->link->Close(status);
        if (member) ForgetDevices(*member);
      }
      gpu_.EndJob();
      gpu_rows_.clear();
      observe::ReportJobEnded(*job_, metrics_);
      EndWorldJob();
      job_.reset();
      coordinator_.reset();
      messages_.reset();
    }
  }
}

void Engine::OnStatus(const StatusEvent& event) const {
  const Clock::time_point now = Clock::now();
  v1::StatusResponse response;
  response.set_version(COLLECTIVE_VERSION);
  response.set_pid(::getpid());
  response.set_socket(config_.socket);
  response.set_metrics_url(metrics_.url());
  response.set_uptime_seconds(std::chrono::duration<double>(now - started_).count());
  *response.mutable_totals() = totals_;
  across_.view().AddTo(*response.mutable_totals());
  v1::GpuStatus* gpu = response.mutable_gpu();
  gpu->set_built(gpu_.built());
  gpu->set_open_ipc_mappings(gpu_.open_mappings());
  gpu->set_batches_in_flight(static_cast<uint32_t>(gpu_.in_flight()));
  v1::TimelineStatus* timeline = response.mutable_timeline();
  timeline->set_active(timeline_.active());
  timeline->set_path(timeline_.path());
  timeline->set_events_written(timeline_.events_written());
  DescribeTuning(response);
  v1::JobStatus* job = response.mutable_job();
  if (job_ == nullptr) {
    job->set_state(shutting_down_ ? v1::JOB_STATE_UNSPECIFIED : v1::JOB_STATE_IDLE);
    event.reply(response);
    return;
  }
  job->set_id(job_->id());
  job->set_state(ToProto(job_->state()));
  job->set_local_size(job_->local_size());
  for (int32_t rank : job_->MissingLocalRanks()) job->add_missing_local_ranks(rank);
  job->set_registered(job_->local_size() - job->missing_local_ranks_size());
  job->set_failure(std::string(job_->failure().message()));
  if (job_->state() != job::JobState::kForming)
    job->set_formed_unix_ms(absl::ToUnixMillis(job_->formed_at()));
  for (const auto& member : job_->members()) {
    if (!member) continue;
    v1::ClientStatus* client = response.add_clients();
    client->set_client_id(member->id);
    client->set_rank(job_->state() == job::JobState::kForming ? -1 : member->topology.rank());
    client->set_local_rank(member->local_rank);
    client->set_pid(member->peer.pid);
    client->set_uid(member->peer.uid);
    client->set_connected_unix_ms(absl::ToUnixMillis(member->registered_at));
    client->set_attached(member->attached() && member->live());
    client->set_arena_bytes(member->segment->arena_bytes());
    client->set_bytes_submitted(member->bytes_submitted);
    client->set_requests_submitted(member->requests_submitted);
    client->set_outstanding_requests(static_cast<uint32_t>(member->outstanding.size()));
    client->set_result_bytes_held(member->result_bytes_held);
  }
  if (coordinator_ != nullptr) {
    DescribePending(now, response);
    DescribeMessages(now, response);
    for (int32_t rank : coordinator_->Joined(0)) response.add_joined_ranks(rank);
  }
  if (across_.view().active()) across_.view().Describe(response.mutable_negotiation());
  if (job_->state() != job::JobState::kForming) {
    for (const auto& [id, set] : job_->process_sets().sets()) {
      v1::ProcessSet* described = response.add_process_sets();
      described->set_id(id);
      for (int32_t rank : set.ranks) described->add_ranks(rank);
    }
  }
  if (job_->results() != nullptr) {
    response.set_result_arena_bytes(job_->results()->capacity());
    response.set_result_arena_used_bytes(job_->results()->bytes_in_use());
  }
  event.reply(response);
}

void Engine::OnMetrics(const MetricsEvent& event) const {
  observe::Metrics::Gauges gauges;
  gauges.uptime_seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  gauges.timeline_active = timeline_.active();
  gauges.job_state = shutting_down_ ? "stopping" : "idle";
  if (job_ != nullptr && !shutting_down_) {
    gauges.job_state = std::string(job::JobStateName(job_->state()));
    for (const auto& member : job_->members()) {
      if (!member) continue;
      gauges.clients_connected += member->attached() && member->live() ? 1 : 0;
      gauges.outstanding_requests += member->outstanding.size();
    }
    if (job_->results() != nullptr) {
      gauges.result_arena_bytes = job_->results()->capacity();
      gauges.result_arena_used_bytes = job_->results()->bytes_in_use();
    }
  }
  if (coordinator_ != nullptr) {
    const Clock::time_point now = Clock::now();
    const Clock::duration stall_after = stalls_.check_after();
    for (const negotiation::WaitingTensor& waiting : AllWaiting(/*with_announced=*/true)) {
      ++gauges.pending_tensors;
      gauges.stalled_tensors +=
          stall_after > Clock::duration::zero() && now - waiting.first_at > stall_after ? 1 : 0;
    }
  }
  v1::MetricsResponse response;
  response.set_text(metrics_.Render(gauges));
  event.reply(response);
}

}  // namespace collective::daemon::engine
