#include "daemon/engine/engine.h"

#include <algorithm>
#include <future>

#include <sys/prctl.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "collective/build_config.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace collective::daemon::engine {
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

Clock::duration RegisterTimeout(const config::DaemonConfig& config) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(config.register_timeout_seconds));
}

}  // namespace

Engine::Engine(const config::DaemonConfig& config, uint64_t epoch, std::string metrics_url,
               StopRequest stop, std::unique_ptr<gpu::DeviceBackend> devices)
    : config_(config),
      epoch_(epoch),
      started_(Clock::now()),
      names_(::geteuid(), config.socket, epoch),
      pool_(ReduceThreads(config.reduce_threads)),
      executor_(pool_),
      metrics_(std::move(metrics_url)),
      systemd_status_(config.socket),
      world_(config_, std::move(stop), *this),
      gpu_(std::move(devices),
           {.max_event_slots = config.max_outstanding_requests,
            .timeout_seconds = config.gpu_timeout_seconds},
           [this](uint64_t batch) { Post(GpuDoneEvent{batch}); }),
      parts_{.config = config_,
             .epoch = epoch_,
             .daemon_uid = ::geteuid(),
             .daemon_gid = ::getegid(),
             .names = names_,
             .pool = pool_,
             .executor = executor_,
             .gpu = gpu_,
             .timeline = timeline_,
             .metrics = metrics_,
             .totals = totals_,
             .world = world_,
             .wake = [this] { doorbell_.Ring(); },
             .check_timeline_path =
                 [this](const std::string& path) { return CheckTimelinePathFree(path); }} {}

Engine::~Engine() {
  if (thread_.joinable()) Shutdown("the daemon object was destroyed");
}

absl::Status Engine::Start() {
  if (!config_.timeline_file.empty()) {
    const job::PeerCredentials self{::getpid(), ::geteuid(), ::getegid()};
    if (absl::Status started =
            timeline_.Start(config_.timeline_file, config_.timeline_mark_cycles, self);
        !started.ok()) {
      return Annotate(started, "cannot start the timeline named by timeline_file");
    }
    log::Daemon().info("timeline started: {}", config_.timeline_file);
  }
  next_heartbeat_ = Clock::now();
  // MPI belongs to the engine thread: it joins the world before it loops,
  // and Start reports whether it could.
  std::promise<absl::Status> world;
  std::future<absl::Status> joined = world.get_future();
  thread_ = std::thread([this, &world] {
    // Its sleeps are short deadlines: the kernel's default 50 us of timer
    // slack would double them.
    ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    const absl::Status status = world_.Start();
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
    doorbell_.Arm(AttachedClients(), Doorbells());
    {
      std::lock_guard lock(mutex_);
      events.swap(queue_);
    }
    bool worked = !events.empty();
    for (EngineEvent& event : events) {
      Dispatch(event);
      Reap();  // a job that ended is gone for the next event (status, say)
    }
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
    worked = PollWorld(Clock::now()) || worked;
    worked = DrainRuns() || worked;
    worked = AdvanceRuns() || worked;
    bool drained = false;
    if (RunReady(drained)) {
      worked = true;
      if (timeline_.mark_cycles()) timeline_.Cycle(MonotonicNanos());
    }
    // What this look announced goes out now, not a look later: the other
    // nodes (node 0 for its decision, the peers for a small allreduce's
    // parts) wait for it, and a look is a yield of the core away.
    if (AnyUnsent()) worked = PollWorld(Clock::now()) || worked;
    const Clock::time_point now = Clock::now();
    RunTimers(now);
    Reap();
    systemd_status_.Observe(runs_.empty() ? nullptr : &runs_.front()->job());
    watchdog_.Tick(now);
    if (drained) spin_.Drained(now);
    if (worked) {
      spin_.Worked(now);
    } else if (Spins(now)) {
      std::this_thread::yield();
    } else {
      doorbell_.Sleep(NextTimer());
    }
  }
  runs_.clear();
  world_.Finish();
  log::Daemon().info("engine stopped");
}

void Engine::Dispatch(EngineEvent& event) {
  std::visit(Overloaded{
                 [this](RegisterEvent& e) {
                   if (shutting_down_) {
                     e.call->Finish(absl::UnavailableError(absl::StrCat(
                                        "collectived is shutting down (", shutdown_reason_, ")")),
                                    {});
                     return;
                   }
                   registrar_.Register(e.call, Clock::now() + RegisterTimeout(config_));
                 },
                 [this](RegisterCancelledEvent& e) { registrar_.Cancelled(e.call_id); },
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

bool Engine::PollWorld(Clock::time_point now) {
  bool worked = registrar_.TakeFormedWorlds();
  // An abandoned MPI world gets no more MPI calls: they could progress
  // transfers into memory the job no longer maps (each run's PollOtherNodes
  // knows its own world).
  if (world_.waits()) {
    world_.LookForStopNotices(now);
    if (world_.exchanging()) {
      std::optional<absl::StatusOr<job::NodeLayout>> layout = world_.PollExchange();
      if (!layout.has_value()) return worked;
      registrar_.Exchanged(std::move(*layout));
      return true;
    }
  }
  for (const auto& run : runs_) worked = run->PollOtherNodes(now) || worked;
  return worked;
}

bool Engine::DrainRuns() {
  bool any = false;
  for (const auto& run : runs_) any = run->Drain() || any;
  return any;
}

bool Engine::AdvanceRuns() {
  bool any = false;
  for (const auto& run : runs_) any = run->Advance() || any;
  return any;
}

bool Engine::RunReady(bool& drained) {
  bool ran = false;
  drained = false;
  // Each turn another run goes first, so that no job's work always waits
  // for another's.
  const size_t first = runs_.empty() ? 0 : next_first_++ % runs_.size();
  for (size_t i = 0; i < runs_.size(); ++i) {
    JobRun& run = *runs_[(first + i) % runs_.size()];
    if (!run.RunReady()) continue;
    ran = true;
    // A cycle of the job's own timeline is one that ran its work.
    if (run.timeline().mark_cycles()) run.timeline().Cycle(MonotonicNanos());
    drained = drained || run.idle();
  }
  return ran;
}

bool Engine::AnyUnsent() const {
  return std::any_of(runs_.begin(), runs_.end(), [](const auto& run) { return run->unsent(); });
}

bool Engine::Spins(Clock::time_point now) const {
  if (runs_.empty() || world_.world().abandoned()) return false;
  const bool owed = std::any_of(runs_.begin(), runs_.end(),
                                [](const auto& run) { return run->OwedByOtherNodes(); });
  return spin_.Spins(now, owed);
}

void Engine::RunTimers(Clock::time_point now) {
  if (now >= next_heartbeat_) {
    const uint64_t heartbeat = MonotonicNanos();
    for (const auto& run : runs_) run->WriteHeartbeats(heartbeat);
    next_heartbeat_ = now + std::chrono::milliseconds(config_.heartbeat_interval_ms);
  }
  registrar_.RunTimers(now);
  for (const auto& run : runs_) run->RunTimers(now);
}

Clock::time_point Engine::NextTimer() const {
  const Clock::time_point now = Clock::now();
  // The watchdog's period may be shorter than heartbeat_interval_ms.
  Clock::time_point next = std::min(next_heartbeat_, watchdog_.next_due());
  if (world_.waits()) {
    Clock::time_point poll = now + std::chrono::milliseconds(config_.heartbeat_interval_ms);
    if (world_.exchanging()) poll = now + std::chrono::milliseconds(config_.cycle_time_ms);
    for (const auto& run : runs_) poll = std::min(poll, run->NextPollOfOtherNodes(now));
    next = std::min(next, poll);
  } else {
    // Jobs with worlds of their own among resident daemons.
    for (const auto& run : runs_) {
      if (run->spans_nodes()) next = std::min(next, run->NextPollOfOtherNodes(now));
    }
  }
  for (const auto& run : runs_) next = run->NextTimer(now, next);
  return next;
}

void Engine::Reap() {
  for (auto it = runs_.begin(); it != runs_.end();) {
    if (!(*it)->done()) {
      ++it;
      continue;
    }
    std::unique_ptr<JobRun> run = std::move(*it);
    it = runs_.erase(it);
    std::vector<job::Job::WaitingRegistration> waiting = std::move(run->job().waiting());
    if (run->job().state() != job::JobState::kForming) {
      run->DescribeTuning(&last_tuning_.emplace());
    }
    run.reset();  // the teardown: every segment of the job goes
    if (!world_.broken().ok() && runs_.empty()) world_.RequestStop();
    for (job::Job::WaitingRegistration& registration : waiting) {
      registrar_.Register(std::move(registration.call), registration.deadline);
    }
    it = runs_.begin();  // registering may have added runs
  }
}

std::vector<shm::ClientSegmentHeader*> Engine::AttachedClients() const {
  std::vector<shm::ClientSegmentHeader*> headers;
  for (const auto& run : runs_) run->AttachedClients(headers);
  return headers;
}

std::vector<std::shared_ptr<job::JobDoorbell>> Engine::Doorbells() const {
  std::vector<std::shared_ptr<job::JobDoorbell>> doorbells;
  for (const auto& run : runs_) {
    if (run->job().doorbell() != nullptr) doorbells.push_back(run->job().doorbell());
  }
  return doorbells;
}

JobRun* Engine::RunOf(const job::SessionLink* link, job::ClientRecord** client) const {
  for (const auto& run : runs_) {
    if (job::ClientRecord* found = run->job().FindByLink(link)) {
      *client = found;
      return run.get();
    }
  }
  *client = nullptr;
  return nullptr;
}

JobRun* Engine::RunOfClient(uint64_t client_id, job::ClientRecord** client) const {
  for (const auto& run : runs_) {
    if (job::ClientRecord* found = run->job().FindClient(client_id)) {
      *client = found;
      return run.get();
    }
  }
  *client = nullptr;
  return nullptr;
}

void Engine::OnClientMessage(ClientMessageEvent& event) {
  job::ClientRecord* client = nullptr;
  JobRun* run = event.message.has_attach()
                    ? RunOfClient(event.message.attach().client_id(), &client)
                    : RunOf(event.link.get(), &client);
  if (run == nullptr && event.message.has_attach()) {
    JobRun::RefuseSession(*event.link, event.peer, event.message.attach().client_id());
    return;
  }
  if (run == nullptr) {
    event.link->Close(absl::FailedPreconditionError(
        "the first message of a session must attach it to a registered client"));
    return;
  }
  const bool attaching = event.message.has_attach() && client != nullptr && !client->attached();
  run->OnClientMessage(event, client);
  if (attaching && client->attached()) registrar_.Attached(client->id);
}

void Engine::OnSessionClosed(const SessionClosedEvent& event) {
  job::ClientRecord* client = nullptr;
  JobRun* run = RunOf(event.link.get(), &client);
  if (run != nullptr && !client->gone) run->OnSessionClosed(*client);
  event.link->Close(absl::OkStatus());
}

absl::Status Engine::CheckTimelinePathFree(const std::string& path) const {
  // Two timelines writing one file would interleave their events.
  if (timeline_.active() && timeline_.path() == path) {
    return absl::FailedPreconditionError(
        absl::StrCat("the daemon's timeline already records to ", path));
  }
  for (const auto& run : runs_) {
    if (run->timeline().active() && run->timeline().path() == path) {
      return absl::FailedPreconditionError(
          absl::StrCat("the timeline of job '", run->job().id(), "' already records to ", path));
    }
  }
  return absl::OkStatus();
}

void Engine::OnTimeline(const TimelineEvent& event) {
  const v1::TimelineRequest& request = event.request;
  // The daemon's timeline, or the one of the job named.
  observe::Timeline* timeline = &timeline_;
  std::string whose = "timeline";
  if (!request.job_id().empty()) {
    JobRun* run = registrar_.Find(request.job_id());
    if (run == nullptr) {
      event.reply(absl::NotFoundError(
          absl::StrCat("collectived serves no job '", request.job_id(), "' (collectivectl status ",
                       "lists the jobs it serves), so it has no timeline of that job")));
      return;
    }
    timeline = &run->timeline();
    whose = absl::StrCat("timeline of job '", request.job_id(), "'");
  }
  absl::Status status;
  switch (request.action()) {
    case v1::TimelineRequest::ACTION_START:
      status = CheckTimelinePathFree(request.path());
      if (!status.ok()) break;
      status = timeline->Start(request.path(), request.mark_cycles(), event.peer);
      if (status.ok()) log::Daemon().info("{} started: {}", whose, request.path());
      break;
    case v1::TimelineRequest::ACTION_STOP:
      status = timeline->Stop();
      if (status.ok()) log::Daemon().info("{} stopped", whose);
      break;
    default:
      status = absl::InvalidArgumentError("the timeline action must be start or stop");
  }
  for (const auto& run : runs_) run->PublishTimelineState();
  if (!status.ok()) {
    event.reply(status);
    return;
  }
  v1::TimelineResponse response;
  response.set_active(timeline->active());
  response.set_path(timeline->path());
  response.set_events_written(timeline->events_written());
  event.reply(response);
}

void Engine::OnShutdown(const ShutdownEvent& event) {
  if (shutting_down_) return;
  shutting_down_ = true;
  shutdown_reason_ = event.reason;
  world_.Stopping();
  log::Daemon().info("shutting down: {}", event.reason);
  const absl::Status status =
      absl::UnavailableError(absl::StrCat("collectived is shutting down (", event.reason, ")"));
  if (event.world_lost && !world_.single()) {
    log::Mpi().info("a node of the MPI world is lost: leaving MPI without waiting for it");
    world_.Break(status, /*abandon_mpi=*/true);
  }
  registrar_.Shutdown(status);
  for (const auto& run : runs_) run->Shutdown(status);
}

void Engine::OnGpuDone(const GpuDoneEvent& event) {
  const std::optional<gpu::DevicePath::Done> done = gpu_.OnDeviceDone(event.batch);
  if (!done.has_value()) return;
  // A job's lane is its sequence.
  for (const auto& run : runs_) {
    if (run->job().sequence() == done->lane) run->DeviceDone(done->batch, done->started);
  }
}

void Engine::WorldAbandoned(const absl::Status& why) {
  for (const auto& run : runs_) run->AbandonDecided(why);
}

}  // namespace collective::daemon::engine
