// The engine: one thread that owns every job the daemon serves and drives
// the executor. Work reaches it two ways: gRPC handlers post events
// (engine_events.h), and clients publish submissions in their segments'
// submission rings; either wakes it through its doorbell
// (engine_doorbell.h). The loop takes the events in arrival order and hands
// each to the part that owns it, then gives every job run (job_run.h) its
// turn: its submissions, the other daemons' messages, its ready work. It
// keeps the daemon's timers, and destroys a run once its job is done. No
// lock guards job state, because no other thread touches it.
//
// The parts: job_run.h (one job's life, and everything that lives as long
// as it), registrar.h (registration and formation), world_link.h (the MPI
// world of daemons), job_world.h (what a job across nodes runs on;
// mpi_job_world.h: a job's view of the MPI world), completion.h (where
// every request and batch ends), intake.h (the submission rings),
// point_to_point.h (sends and receives), job_tuning.h (autotuning),
// across_nodes.h (a job's negotiation with node 0), ready_check.h (the one
// check of a ready tensor), shared_parts.h (what the runs share).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>

#include "absl/status/status.h"
#include "collective/v1/status.pb.h"
#include "config/daemon_config.h"
#include "daemon/engine/engine_doorbell.h"
#include "daemon/engine/engine_events.h"
#include "daemon/engine/engine_spin.h"
#include "daemon/engine/job_run.h"
#include "daemon/engine/registrar.h"
#include "daemon/engine/shared_parts.h"
#include "daemon/engine/world_link.h"
#include "daemon/exec/executor.h"
#include "daemon/exec/thread_pool.h"
#include "daemon/gpu/device_backend_factory.h"
#include "daemon/gpu/device_path.h"
#include "daemon/observe/metrics.h"
#include "daemon/observe/systemd_notify.h"
#include "daemon/observe/timeline.h"
#include "daemon/observe/watchdog.h"
#include "shm/segment_names.h"

namespace collective::daemon::engine {

class Engine final : private WorldLink::Listener {
 public:
  // Asks the daemon to stop (with why, and the process's exit code): the
  // engine's way out when its MPI world of daemons broke.
  using StopRequest = WorldLink::StopRequest;

  // `metrics_url`: where the metrics are served over HTTP, if they are.
  // `devices` is the GPU path's backend (null: no CUDA tensors); tests pass
  // a fake.
  Engine(const config::DaemonConfig& config, uint64_t epoch, std::string metrics_url = {},
         StopRequest stop = nullptr,
         std::unique_ptr<gpu::DeviceBackend> devices = gpu::CreateDeviceBackend());
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts the engine thread (and the timeline, if the configuration names
  // a file).
  absl::Status Start();

  // Thread-safe. False once the engine has stopped: the caller answers its
  // RPC itself then.
  bool Post(EngineEvent event);
  // Thread-safe. What a caller whose Post was refused answers:
  // UNAVAILABLE "collectived is shutting down (<reason>)", the reason the
  // pending requests were failed with.
  absl::Status Refusal() const;

  // Fails all pending work with an error naming `reason`, ends every
  // session and registration, removes the jobs' segments, and stops the
  // engine thread. Returns when the thread has exited.
  void Shutdown(const std::string& reason, bool world_lost = false);

 private:
  void Loop();
  void Dispatch(EngineEvent& event);
  // The turns every run gets; each says whether anything happened.
  bool PollWorld(Clock::time_point now);
  bool DrainRuns();
  bool AdvanceRuns();
  bool RunReady(bool& drained);
  bool AnyUnsent() const;
  void RunTimers(Clock::time_point now);
  Clock::time_point NextTimer() const;
  // Whether the engine, finding nothing to do, looks again at once rather
  // than sleeping (see engine_spin.h).
  bool Spins(Clock::time_point now) const;
  // Destroys the runs whose jobs are done; the registrations that waited
  // for them register afresh.
  void Reap();
  std::vector<shm::ClientSegmentHeader*> AttachedClients() const;
  std::vector<std::shared_ptr<job::JobDoorbell>> Doorbells() const;
  // The run and member a session belongs to, or null.
  JobRun* RunOf(const job::SessionLink* link, job::ClientRecord** client) const;
  JobRun* RunOfClient(uint64_t client_id, job::ClientRecord** client) const;

  void OnClientMessage(ClientMessageEvent& event);
  void OnSessionClosed(const SessionClosedEvent& event);
  void OnStatus(const StatusEvent& event) const;
  void OnMetrics(const MetricsEvent& event) const;
  void OnTimeline(const TimelineEvent& event);
  // FAILED_PRECONDITION if a timeline (the daemon's or a job's) records to
  // `path`.
  absl::Status CheckTimelinePathFree(const std::string& path) const;
  void OnShutdown(const ShutdownEvent& event);
  void OnGpuDone(const GpuDoneEvent& event);

  // WorldLink::Listener.
  void WorldAbandoned(const absl::Status& why) override;
  bool ServesJobs() const override { return !runs_.empty(); }

  const config::DaemonConfig config_;
  const uint64_t epoch_;
  const Clock::time_point started_;
  shm::SegmentNames names_;
  exec::ThreadPool pool_;
  exec::Executor executor_;
  observe::Timeline timeline_;
  observe::Metrics metrics_;
  observe::JobStatusNotifier systemd_status_;
  // systemd's watchdog, pinged from the loop: a wedged engine is restarted.
  observe::Watchdog watchdog_ = observe::Watchdog::FromEnvironment();
  v1::Totals totals_;
  WorldLink world_;
  size_t next_first_ = 0;  // the run whose ready work runs first, in turn
  // The last job's autotuning (its trials, or the values it fixed): what
  // status shows while no job runs.
  std::optional<v1::AutotuneStatus> last_tuning_;
  EngineSpin spin_{std::chrono::microseconds(config_.engine_spin_us)};
  Clock::time_point next_heartbeat_;
  bool shutting_down_ = false;
  std::string shutdown_reason_;

  // The event queue and the doorbell: the only state shared with other
  // threads.
  EngineDoorbell doorbell_{config_.engine_wait};
  mutable std::mutex mutex_;
  std::vector<EngineEvent> queue_;
  bool stopped_ = false;
  std::string stopped_because_;  // shutdown_reason_, once stopped_
  std::thread thread_;

  // The GPU path: its completion callbacks post to the queue above until it
  // is gone, so it goes after the runs and before the queue.
  gpu::DevicePath gpu_;
  SharedParts parts_;
  Runs runs_;
  Registrar registrar_{parts_, runs_};
};

}  // namespace collective::daemon::engine
