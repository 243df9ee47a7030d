// One log line when a job starts and one when it ends, with its summary (job
// id, ranks, duration, collectives, bytes, the failure if any) as key=value
// pairs a log collector can parse; and the job counts of the metrics.
#pragma once

#include "absl/status/status.h"
#include "collective/v1/status.pb.h"
#include "daemon/job/job.h"
#include "daemon/observe/metrics.h"

namespace collective::daemon::observe {

// The job has formed.
void ReportJobStarted(const job::Job& job, Metrics& metrics);
// A formed job is being torn down (every rank left, or it failed and the
// rest left, or the daemon stops); `totals` are what it did.
void ReportJobEnded(const job::Job& job, const v1::Totals& totals, Metrics& metrics);
// A forming job is given up: `why` says who never registered.
void ReportJobNotFormed(const job::Job& job, const absl::Status& why, Metrics& metrics);

}  // namespace collective::daemon::observe
