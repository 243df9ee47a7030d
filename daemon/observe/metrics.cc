#include "daemon/observe/metrics.h"

#include <chrono>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "collective/build_config.h"
#include "common/dtype.h"
#include "daemon/observe/process_metrics.h"

namespace collective::daemon::observe {
namespace {

double Seconds(Clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

// Control collectives carry no data type.
std::string DtypeLabel(v1::DataType dtype) {
  return dtype == v1::DATA_TYPE_UNSPECIFIED ? "none" : DataTypeName(dtype);
}

absl::string_view OutcomeName(JobOutcome outcome) {
  switch (outcome) {
    case JobOutcome::kCompleted:
      return "completed";
    case JobOutcome::kFailed:
      return "failed";
    case JobOutcome::kNotFormed:
      return "not_formed";
  }
  return "unknown";
}

// Buckets: negotiation waits range from microseconds (every rank ready) to
// the stall limits (a rank late by minutes); executions from a 4-byte copy
// to a multi-GiB reduction; batches up to the fusion threshold's worth.
std::vector<double> WaitBounds() { return {1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1, 10, 60, 600}; }
std::vector<double> ExecutionBounds() { return {1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1, 10}; }
std::vector<double> TensorCountBounds() { return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}; }
std::vector<double> ByteBounds() {
  std::vector<double> bounds;
  for (double bytes = 1024; bytes <= 4.0 * (1ull << 30); bytes *= 4) bounds.push_back(bytes);
  return bounds;
}

// The gauges of Metrics::Load: collectived_NAME over every job, and
// collectived_job_NAME{job_id} for each.
struct LoadFamily {
  absl::string_view name;
  uint64_t Metrics::Load::*field;
  absl::string_view help;  // completed by ", over every job." or ", of the job."
};
constexpr LoadFamily kLoadFamilies[] = {
    {"clients_connected", &Metrics::Load::clients_connected, "Clients with an open session"},
    {"outstanding_requests", &Metrics::Load::outstanding_requests,
     "Requests submitted and not yet answered"},
    {"pending_tensors", &Metrics::Load::pending_tensors,
     "Tensors some ranks submitted and others not yet"},
    {"stalled_tensors", &Metrics::Load::stalled_tensors,
     "Pending tensors older than stall_check_seconds (see collectivectl status)"},
    {"result_arena_bytes", &Metrics::Load::result_arena_bytes, "Size of the result segments"},
    {"result_arena_used_bytes", &Metrics::Load::result_arena_used_bytes,
     "Bytes of the result segments holding results not yet released by every reader"},
};

// The other series of one job: collectived_job_NAME{job_id}.
struct JobFamily {
  absl::string_view name;
  absl::string_view type;
  uint64_t Metrics::JobSeries::*field;
  absl::string_view help;
};
constexpr JobFamily kJobFamilies[] = {
    {"ranks", "gauge", &Metrics::JobSeries::ranks,
     "Ranks of the job on every node, once it formed (0 while it forms)."},
    {"local_ranks", "gauge", &Metrics::JobSeries::local_ranks,
     "Ranks of the job that this daemon serves."},
    {"collectives_total", "counter", &Metrics::JobSeries::collectives,
     "Collectives of the job completed on this node."},
    {"requests_total", "counter", &Metrics::JobSeries::requests,
     "Requests of the job completed successfully: one per rank of each collective."},
    {"bytes_reduced_total", "counter", &Metrics::JobSeries::bytes_reduced,
     "Bytes the job's ranks handed in for its completed collectives."},
    {"errors_total", "counter", &Metrics::JobSeries::errors,
     "Requests of the job answered with an error."},
    {"timeline_active", "gauge", &Metrics::JobSeries::timeline_active,
     "1 while a timeline of the job alone records."},
};

}  // namespace

std::string ErrorKind(absl::StatusCode code) {
  return absl::AsciiStrToLower(absl::StatusCodeToString(code));
}

Metrics::Metrics(std::string url)
    : url_(std::move(url)),
      negotiation_seconds_(WaitBounds()),
      execution_seconds_(ExecutionBounds()),
      batch_tensors_(TensorCountBounds()),
      batch_bytes_(ByteBounds()) {}

void Metrics::Completed(const negotiation::ReadyTensor& tensor, uint64_t bytes) {
  const v1::TensorRequest& request = tensor.request();
  Counts& counts = by_kind_[{request.collective(), request.dtype()}];
  const uint64_t requests = tensor.submissions.size();
  ++counts.collectives;
  counts.requests += requests;
  counts.bytes += bytes;
  negotiation_seconds_.Observe(Seconds(tensor.ready_at - tensor.first_at));
}

void Metrics::BatchCompleted(const exec::FusedBatch& batch,
                             const exec::Executor::Outcome& outcome) {
  for (const negotiation::ReadyTensor& tensor : batch.tensors) {
    uint64_t bytes = 0;
    for (const negotiation::Submission& submission : tensor.submissions)
      bytes += submission.request.length();
    Completed(tensor, bytes);
  }
  execution_seconds_.Observe(Seconds(outcome.finished - outcome.started));
  batch_tensors_.Observe(static_cast<double>(batch.tensors.size()));
  batch_bytes_.Observe(static_cast<double>(batch.bytes));
}

void Metrics::ControlCompleted(const negotiation::ReadyTensor& tensor) { Completed(tensor, 0); }

void Metrics::RequestFailed(const absl::Status& status) { ++errors_[status.code()]; }

void Metrics::JobStarted() { ++jobs_started_; }

void Metrics::JobEnded(JobOutcome outcome) { ++jobs_ended_[outcome]; }

std::string Metrics::Render(const Gauges& gauges) const {
  PrometheusText out;
  out.Family("collectived_build_info", "gauge", "The daemon's version; always 1.");
  out.Sample("collectived_build_info", {{"version", COLLECTIVE_VERSION}}, uint64_t{1});
  out.Family("collectived_uptime_seconds", "gauge", "Seconds since the daemon started.");
  out.Sample("collectived_uptime_seconds", {}, gauges.uptime_seconds);

  // One counter family per field of Counts, labelled by collective and dtype.
  auto by_kind = [&](absl::string_view name, uint64_t Counts::*field, absl::string_view help) {
    out.Family(name, "counter", help);
    for (const auto& [kind, counts] : by_kind_) {
      out.Sample(name,
                 {{"collective", CollectiveName(kind.first)}, {"dtype", DtypeLabel(kind.second)}},
                 counts.*field);
    }
  };
  by_kind("collectived_collectives_total", &Counts::collectives,
          "Collectives completed on this node: one per tensor, whatever the number of ranks.");
  by_kind("collectived_requests_total", &Counts::requests,
          "Requests completed successfully: one per rank of each collective.");
  by_kind("collectived_bytes_total", &Counts::bytes,
          "Bytes the ranks handed in for the completed collectives (the sum of their input "
          "tensors).");
  out.Family("collectived_errors_total", "counter",
             "Requests answered with an error, by kind (the status code): invalid_argument for a "
             "refused request, failed_precondition for ranks that disagree (mismatch) or a job "
             "that a rank left, aborted when a rank died, deadline_exceeded past the stall "
             "limit, resource_exhausted past max_outstanding_requests, unavailable while the "
             "daemon stops, data_loss for a damaged segment.");
  for (const auto& [code, count] : errors_) {
    out.Sample("collectived_errors_total", {{"kind", ErrorKind(code)}}, count);
  }

  out.Family("collectived_negotiation_wait_seconds", "histogram",
             "From the first rank's submission of a tensor to the last one's: how long ranks "
             "waited for each other.");
  out.Samples("collectived_negotiation_wait_seconds", negotiation_seconds_);
  out.Family("collectived_reduction_seconds", "histogram",
             "Time the executor spent on one fused batch: the reduction, or the copies of "
             "allgather, broadcast and alltoall.");
  out.Samples("collectived_reduction_seconds", execution_seconds_);
  out.Family("collectived_fusion_batch_tensors", "histogram", "Tensors per fused batch.");
  out.Samples("collectived_fusion_batch_tensors", batch_tensors_);
  out.Family("collectived_fusion_batch_bytes", "histogram",
             "Bytes of each fused batch's result buffer.");
  out.Samples("collectived_fusion_batch_bytes", batch_bytes_);

  out.Family("collectived_jobs_started_total", "counter", "Jobs that formed.");
  out.Sample("collectived_jobs_started_total", {}, jobs_started_);
  out.Family("collectived_jobs_ended_total", "counter", "Jobs that ended, by outcome.");
  for (JobOutcome outcome : {JobOutcome::kCompleted, JobOutcome::kFailed, JobOutcome::kNotFormed}) {
    const auto it = jobs_ended_.find(outcome);
    out.Sample("collectived_jobs_ended_total", {{"outcome", std::string(OutcomeName(outcome))}},
               it == jobs_ended_.end() ? uint64_t{0} : it->second);
  }
  out.Family("collectived_job_state", "gauge", "1 for the state the daemon's job is in.");
  for (const char* state : {"idle", "forming", "running", "ending", "failed", "stopping"}) {
    out.Sample("collectived_job_state", {{"state", state}},
               uint64_t{gauges.job_state == state ? 1u : 0u});
  }
  for (const LoadFamily& family : kLoadFamilies) {
    const std::string name = absl::StrCat("collectived_", family.name);
    out.Family(name, "gauge", absl::StrCat(family.help, ", over every job."));
    out.Sample(name, {}, gauges.load.*family.field);
  }
  out.Family("collectived_timeline_active", "gauge", "1 while a timeline records.");
  out.Sample("collectived_timeline_active", {}, uint64_t{gauges.timeline_active ? 1u : 0u});
  RenderJobs(gauges.jobs, out);
  if (const std::optional<ProcessStats> process = ReadProcessStats()) {
    RenderProcessMetrics(*process, out);
  }
  return out.text();
}

Metrics::Load& Metrics::Load::operator+=(const Load& other) {
  for (const LoadFamily& family : kLoadFamilies) this->*family.field += other.*family.field;
  return *this;
}

void Metrics::RenderJobs(const std::vector<JobSeries>& jobs, PrometheusText& out) const {
  // One family per field, one sample per job; the families are there with
  // no job too, so that every series is known from the start.
  out.Family("collectived_job_status", "gauge", "1 for the state the job is in.");
  for (const JobSeries& job : jobs) {
    for (const char* state : {"forming", "running", "ending", "failed"}) {
      out.Sample("collectived_job_status", {{kJobLabel, job.id}, {"state", state}},
                 uint64_t{job.state == state ? 1u : 0u});
    }
  }
  for (const JobFamily& family : kJobFamilies) {
    const std::string name = absl::StrCat("collectived_job_", family.name);
    out.Family(name, family.type, family.help);
    for (const JobSeries& job : jobs) out.Sample(name, {{kJobLabel, job.id}}, job.*family.field);
  }
  for (const LoadFamily& family : kLoadFamilies) {
    const std::string name = absl::StrCat("collectived_job_", family.name);
    out.Family(name, "gauge", absl::StrCat(family.help, ", of the job."));
    for (const JobSeries& job : jobs) {
      out.Sample(name, {{kJobLabel, job.id}}, job.load.*family.field);
    }
  }
}

}  // namespace collective::daemon::observe
