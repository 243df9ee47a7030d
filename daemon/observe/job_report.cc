#include "daemon/observe/job_report.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace collective::daemon::observe {
namespace {

// A logfmt value: quoted, with quotes and backslashes escaped and the line
// kept on one line.
std::string Quoted(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

}  // namespace

void ReportJobStarted(const job::Job& job, Metrics& metrics) {
  metrics.JobStarted();
  const job::NodeLayout& layout = job.layout();
  log::Coord().info("job started: job={} ranks={} local_ranks={} nodes={} node={} first_rank={}",
                    Quoted(job.id()), layout.world_size(), job.local_size(), layout.nodes(),
                    layout.node, layout.offset());
}

void ReportJobEnded(const job::Job& job, const v1::Totals& totals, Metrics& metrics) {
  const bool failed = job.state() == job::JobState::kFailed;
  metrics.JobEnded(failed ? JobOutcome::kFailed : JobOutcome::kCompleted);
  const std::string summary =
      absl::StrCat("job ended: job=", Quoted(job.id()), " result=", failed ? "failed" : "completed",
                   " ranks=", job.layout().world_size(), " local_ranks=", job.local_size(),
                   " duration_s=", absl::ToDoubleSeconds(absl::Now() - job.formed_at()),
                   " collectives=", totals.collectives(), " requests=", totals.requests(),
                   " bytes=", totals.bytes_reduced(), " errors=", totals.errors());
  if (failed) {
    log::Coord().warn("{} failure={}", summary, Quoted(job.failure().message()));
  } else {
    log::Coord().info("{}", summary);
  }
}

void ReportJobNotFormed(const job::Job& job, const absl::Status& why, Metrics& metrics) {
  metrics.JobEnded(JobOutcome::kNotFormed);
  log::Coord().warn("job did not form: job={} registered={} local_ranks={} failure={}",
                    Quoted(job.id()),
                    job.local_size() - static_cast<int>(job.MissingLocalRanks().size()),
                    job.local_size(), Quoted(why.message()));
}

}  // namespace collective::daemon::observe
