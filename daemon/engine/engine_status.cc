// What the daemon says of itself: status (every job's report, and the
// daemon's own state) and the gauges of its metrics.
#include <unistd.h>

#include "collective/build_config.h"
#include "daemon/engine/engine.h"

namespace collective::daemon::engine {

void Engine::OnStatus(const StatusEvent& event) const {
  const Clock::time_point now = Clock::now();
  v1::StatusResponse response;
  response.set_version(COLLECTIVE_VERSION);
  response.set_pid(::getpid());
  response.set_socket(config_.socket);
  response.set_metrics_url(metrics_.url());
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
  for (const auto& run : runs_) {
    // The negotiation across nodes counts as it goes (the daemon's totals
    // take a job's when it ends).
    run->AddLiveTotals(*response.mutable_totals());
    if (!event.job_id.empty() && event.job_id != run->job().id()) continue;
    run->Describe(now, *response.add_jobs());
  }
  if (response.jobs().empty()) {
    // No job (or not the one asked for): the last job's tuning, or the
    // knobs as configured.
    if (last_tuning_.has_value()) {
      *response.mutable_autotune() = *last_tuning_;
    } else {
      JobTuning(config_).Describe(response.mutable_autotune());
    }
    response.mutable_job()->set_state(runs_.empty() && shutting_down_ ? v1::JOB_STATE_UNSPECIFIED
                                                                      : v1::JOB_STATE_IDLE);
    event.reply(response);
    return;
  }
  // The first job, where a daemon of one job at a time said everything.
  const v1::JobReport& first = response.jobs(0);
  *response.mutable_job() = first.job();
  *response.mutable_clients() = first.clients();
  *response.mutable_pending() = first.pending();
  *response.mutable_pending_messages() = first.pending_messages();
  *response.mutable_process_sets() = first.process_sets();
  *response.mutable_joined_ranks() = first.joined_ranks();
  response.set_result_arena_bytes(first.result_arena_bytes());
  response.set_result_arena_used_bytes(first.result_arena_used_bytes());
  if (first.has_negotiation()) *response.mutable_negotiation() = first.negotiation();
  *response.mutable_autotune() = first.autotune();
  event.reply(response);
}

void Engine::OnMetrics(const MetricsEvent& event) const {
  observe::Metrics::Gauges gauges;
  const Clock::time_point now = Clock::now();
  gauges.uptime_seconds = std::chrono::duration<double>(now - started_).count();
  gauges.timeline_active = timeline_.active();
  gauges.job_state = shutting_down_ ? "stopping" : "idle";
  if (!runs_.empty() && !shutting_down_) {
    gauges.job_state = std::string(job::JobStateName(runs_.front()->job().state()));
  }
  for (const auto& run : runs_) run->AddGauges(now, gauges);
  v1::MetricsResponse response;
  response.set_text(metrics_.Render(gauges));
  event.reply(response);
}

}  // namespace collective::daemon::engine
