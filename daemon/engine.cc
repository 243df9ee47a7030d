#include "daemon/engine.h"

#include <algorithm>
#include <ctime>
#include <future>

#include <unistd.h>

#include "collective/build_config.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace collective::daemon {
namespace {

size_t ReduceThreads(uint32_t configured) {
  if (configured != 0) return configured;
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<size_t>(online) : 1;
}

template <class... Handlers>
struct Overloaded : Handlers... {
  using Handlers::operator()...;
};

v1::JobState ToProto(JobState state) {
  switch (state) {
    case JobState::kForming:
      return v1::JOB_STATE_FORMING;
    case JobState::kRunning:
      return v1::JOB_STATE_RUNNING;
    case JobState::kEnding:
      return v1::JOB_STATE_ENDING;
    case JobState::kFailed:
      return v1::JOB_STATE_FAILED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

}  // namespace

Engine::Engine(const config::DaemonConfig& config, uint64_t epoch,
               std::unique_ptr<gpu::DeviceBackend> devices)
    : config_(config),
      epoch_(epoch),
      daemon_uid_(::geteuid()),
      daemon_gid_(::getegid()),
      started_(Clock::now()),
      names_(daemon_uid_, config.socket, epoch),
      pool_(ReduceThreads(config.reduce_threads)),
      executor_(pool_),
      stalls_(config.stall_check_seconds, config.stall_shutdown_seconds),
      gpu_(std::move(devices),
           {.max_event_slots = config.max_outstanding_requests,
            .timeout_seconds = config.gpu_timeout_seconds},
           [this](uint64_t batch) { Post(GpuDoneEvent{batch}); }) {}

Engine::~Engine() {
  if (thread_.joinable()) Shutdown("the daemon object was destroyed");
}

absl::Status Engine::Start() {
  if (!config_.timeline_file.empty()) {
    const PeerCredentials self{::getpid(), daemon_uid_, daemon_gid_};
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

void Engine::Shutdown(const std::string& reason) {
  Post(ShutdownEvent{reason});
  if (thread_.joinable()) thread_.join();
}

void Engine::Loop() {
  std::vector<EngineEvent> events;
  while (true) {
    // Arm before looking for work, so that work arriving after the look
    // ends the sleep below (see EngineDoorbell).
    doorbell_.Arm(AttachedClients());
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
      continue;
    }
    worked = PollWorld() || worked;
    worked = DrainSubmissionRings() || worked;
    if (RunReady()) {
      worked = true;
      if (timeline_.mark_cycles()) timeline_.Cycle(MonotonicNanos());
    }
    RunTimers(Clock::now());
    if (!worked) doorbell_.Sleep(NextTimer());
  }
  // MPI ends on the thread that began it.
  exchange_.reset();
  if (abandoned_.empty()) world_.reset();
  log::Daemon().info("engine stopped");
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
                 [this](GpuDoneEvent& e) { OnGpuDone(e); },
             },
             event);
}

Clock::time_point Engine::NextTimer() const {
  Clock::time_point next = next_heartbeat_;
  if (WaitsForWorld()) {
    next = std::min(next, Clock::now() + std::chrono::milliseconds(config_.cycle_time_ms));
  }
  if (job_ == nullptr) return next;
  if (stalls_.enabled() && coordinator_ != nullptr && !coordinator_->idle()) {
    next = std::min(next, next_stall_check_);
  }
  if (job_->state() == JobState::kForming) return std::min(next, job_->formation_deadline());
  for (const auto& member : job_->members()) {
    if (member && !member->attached() && member->live()) {
      next = std::min(next, member->attach_deadline);
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
  if (job_->state() == JobState::kForming) {
    if (now < job_->formation_deadline()) return;
    const std::vector<int32_t> missing = job_->MissingLocalRanks();
    const absl::Status late = absl::DeadlineExceededError(
        missing.empty()
            ? absl::StrCat("job '", job_->id(), "' did not form within ",
                           config_.register_timeout_seconds, " s: all ", job_->local_size(),
                           " local ranks of node ", world_->rank(),
                           " registered, but not every other node's ranks did")
            : absl::StrCat("job '", job_->id(), "' did not form within ",
                           config_.register_timeout_seconds, " s: ", DescribeLocalRanks(missing),
                           " of ", job_->local_size(), " never registered"));
    if (exchange_ != nullptr) AbandonExchange(late);
    AbortFormation(late);
    return;
  }
  for (const auto& member : job_->members()) {
    if (!member || member->attached() || !member->live() || now < member->attach_deadline) {
      continue;
    }
    member->gone = true;
    member->segment->Unlink();
    FailJob(absl::UnavailableError(
        absl::StrCat(DescribeMember(*member), " registered with job '", job_->id(),
                     "' but did not open its session within ", config_.register_timeout_seconds,
                     " s; the job cannot continue")));
  }
  MaybeTearDownJob();
}

void Engine::CheckStalls(Clock::time_point now) {
  if (coordinator_ == nullptr || job_->state() != JobState::kRunning) return;
  for (const StalledTensor& stalled : stalls_.Inspect(now, *coordinator_, job_->process_sets())) {
    std::vector<PendingTensor> failed =
        coordinator_->TakeTensor(stalled.process_set_id, stalled.name);
    if (failed.empty()) continue;
    const absl::Status why = absl::DeadlineExceededError(stalls_.ShutdownMessage(stalled));
    log::Coord().error("{}", why.message());
    FailSubmissions(std::move(failed), why);
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
  const uint64_t now = MonotonicNanos();
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
  if (job_ != nullptr) {
    if (job_->state() == JobState::kForming) {
      AbortFormation(status);
    } else {
      FailJob(status);
      for (const auto& member : job_->members()) {
        if (member && member->link) member->link->Close(status);
        if (member) ForgetDevices(*member);
      }
      gpu_.EndJob();
      job_.reset();
      coordinator_.reset();
    }
  }
}

void Engine::OnStatus(const StatusEvent& event) const {
  const Clock::time_point now = Clock::now();
  v1::StatusResponse response;
  response.set_version(COLLECTIVE_VERSION);
  response.set_pid(::getpid());
  response.set_socket(config_.socket);
  response.set_uptime_seconds(std::chrono::duration<double>(now - started_).count());
  *response.mutable_totals() = totals_;
  v1::GpuStatus* gpu = response.mutable_gpu();
  gpu->set_built(gpu_.built());
  gpu->set_open_ipc_mappings(gpu_.open_mappings());
  gpu->set_batches_in_flight(static_cast<uint32_t>(gpu_.in_flight()));
  v1::TimelineStatus* timeline = response.mutable_timeline();
  timeline->set_active(timeline_.active());
  timeline->set_path(timeline_.path());
  timeline->set_events_written(timeline_.events_written());
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
  if (job_->state() != JobState::kForming)
    job->set_formed_unix_ms(absl::ToUnixMillis(job_->formed_at()));
  for (const auto& member : job_->members()) {
    if (!member) continue;
    v1::ClientStatus* client = response.add_clients();
    client->set_client_id(member->id);
    client->set_rank(job_->state() == JobState::kForming ? -1 : member->topology.rank());
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
    coordinator_->Describe(now, job_->process_sets(), stalls_.check_after(),
                           response.mutable_pending());
    for (int32_t rank : coordinator_->Joined(0)) response.add_joined_ranks(rank);
  }
  if (job_->state() != JobState::kForming) {
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

}  // namespace collective::daemon
