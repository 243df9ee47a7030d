// What collectived has done and is doing, for Prometheus (`collectivectl
// metrics`, and GET /metrics where metrics_listen is set): counters and
// histograms that the engine updates where work completes or fails, and
// gauges it reads from its own state when asked for the text. Series of one
// job carry its id as the job_id label and are read from the job's run when
// asked, so a job that ended drops out of them (the daemon-wide series go on
// counting it). Engine thread only, like the state it counts: other threads
// ask the engine for the text (MetricsEvent) and never read this object, so
// it needs no lock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "collective/v1/types.pb.h"
#include "daemon/exec/executor.h"
#include "daemon/exec/fusion.h"
#include "daemon/negotiation/coordinator.h"
#include "daemon/observe/prometheus_text.h"

namespace collective::daemon::observe {

// How a job ended, for collectived_jobs_ended_total.
enum class JobOutcome {
  kCompleted,  // every rank left
  kFailed,     // a rank died, a collective could not run, or the daemon stopped
  kNotFormed,  // some local rank never registered
};

class Metrics {
 public:
  // `url`: where the HTTP listener serves the text, if there is one.
  explicit Metrics(std::string url);

  const std::string& url() const { return url_; }

  // A fused batch ran and each of its tensors completed on every rank.
  void BatchCompleted(const exec::FusedBatch& batch, const exec::Executor::Outcome& outcome);
  // A barrier, join or process-set change completed on every rank.
  void ControlCompleted(const negotiation::ReadyTensor& tensor);
  // One rank's request was answered with an error.
  void RequestFailed(const absl::Status& status);
  void JobStarted();
  void JobEnded(JobOutcome outcome);

  // What the clients of one job, or of every job, hold of the daemon now:
  // gauges both daemon-wide (collectived_NAME) and per job
  // (collectived_job_NAME{job_id}).
  struct Load {
    uint64_t clients_connected = 0;
    uint64_t outstanding_requests = 0;
    uint64_t pending_tensors = 0;
    uint64_t stalled_tensors = 0;
    uint64_t result_arena_bytes = 0;
    uint64_t result_arena_used_bytes = 0;
    Load& operator+=(const Load& other);
  };

  // What one job (formed or forming) has done and is doing: its series,
  // labelled with its id.
  struct JobSeries {
    std::string id;
    std::string state;         // forming, running, ending, failed
    uint64_t ranks = 0;        // in the whole job; 0 while it forms
    uint64_t local_ranks = 0;  // served by this daemon
    uint64_t collectives = 0;
    uint64_t requests = 0;
    uint64_t bytes_reduced = 0;
    uint64_t errors = 0;
    uint64_t timeline_active = 0;  // 1 while its own timeline records
    Load load;
  };

  // The engine's state at the moment of asking.
  struct Gauges {
    std::string job_state;         // idle, forming, running, ending, failed, stopping
    Load load;                     // over every job
    bool timeline_active = false;  // the daemon's timeline
    double uptime_seconds = 0;
    std::vector<JobSeries> jobs;  // every job the daemon serves now
  };
  std::string Render(const Gauges& gauges) const;

 private:
  struct Counts {
    uint64_t collectives = 0;
    uint64_t requests = 0;
    uint64_t bytes = 0;
  };
  void Completed(const negotiation::ReadyTensor& tensor, uint64_t bytes);
  void RenderJobs(const std::vector<JobSeries>& jobs, PrometheusText& out) const;

  const std::string url_;
  std::map<std::pair<v1::Collective, v1::DataType>, Counts> by_kind_;
  std::map<absl::StatusCode, uint64_t> errors_;
  std::map<JobOutcome, uint64_t> jobs_ended_;
  uint64_t jobs_started_ = 0;
  Histogram negotiation_seconds_;
  Histogram execution_seconds_;
  Histogram batch_tensors_;
  Histogram batch_bytes_;
};

// "invalid_argument": a status code as the label value of errors by kind.
std::string ErrorKind(absl::StatusCode code);

// The label that names a job. Not "job": Prometheus gives every scraped
// series the scrape job's `job` label, and would rename ours exported_job.
inline constexpr absl::string_view kJobLabel = "job_id";

}  // namespace collective::daemon::observe
