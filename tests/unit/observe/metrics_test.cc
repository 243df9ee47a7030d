// daemon/metrics and daemon/prometheus_text: what the engine records becomes
// exact counters and histograms in Prometheus' text format.
#include "daemon/observe/metrics.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "daemon/observe/prometheus_text.h"

namespace collective::daemon::observe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

negotiation::ReadyTensor Tensor(v1::Collective collective, v1::DataType dtype,
                                std::vector<uint64_t> lengths, Clock::duration waited) {
  negotiation::ReadyTensor tensor;
  tensor.name = "t";
  tensor.set_size = static_cast<int32_t>(lengths.size());
  tensor.first_at = Clock::time_point(std::chrono::seconds(100));
  tensor.ready_at = tensor.first_at + waited;
  for (uint64_t length : lengths) {
    negotiation::Submission submission;
    submission.request.set_collective(collective);
    submission.request.set_dtype(dtype);
    submission.request.set_length(length);
    tensor.submissions.push_back(std::move(submission));
  }
  return tensor;
}

exec::Executor::Outcome Took(Clock::duration duration) {
  exec::Executor::Outcome outcome;
  outcome.started = Clock::time_point(std::chrono::seconds(200));
  outcome.finished = outcome.started + duration;
  return outcome;
}

TEST(HistogramTest, CountsIntoTheFirstBucketWhoseBoundHoldsTheValue) {
  observe::Histogram histogram({1, 2, 4});
  for (double value : {0.5, 1.0, 1.5, 4.0, 9.0}) histogram.Observe(value);
  // Bounds are inclusive ("le"); 9 lands in +Inf.
  EXPECT_EQ(histogram.counts(), (std::vector<uint64_t>{2, 1, 1, 1}));
  EXPECT_EQ(histogram.count(), 5u);
  EXPECT_DOUBLE_EQ(histogram.sum(), 16.0);
}

TEST(PrometheusTextTest, WritesFamiliesCumulativeBucketsAndEscapes) {
  observe::Histogram histogram({0.001, 0.5});
  histogram.Observe(0.0009765625);  // 2^-10: sums exactly
  histogram.Observe(0.25);
  histogram.Observe(3);
  observe::PrometheusText text;
  text.Family("x_total", "counter", "Help with a \\ and a\nnewline.");
  text.Sample("x_total", {{"a", "quote\" back\\slash\nline"}, {"b", "2"}}, uint64_t{7});
  text.Family("h_seconds", "histogram", "A histogram.");
  text.Samples("h_seconds", histogram);
  EXPECT_EQ(text.text(),
            "# HELP x_total Help with a \\\\ and a\\nnewline.\n"
            "# TYPE x_total counter\n"
            "x_total{a=\"quote\\\" back\\\\slash\\nline\",b=\"2\"} 7\n"
            "# HELP h_seconds A histogram.\n"
            "# TYPE h_seconds histogram\n"
            "h_seconds_bucket{le=\"0.001\"} 1\n"
            "h_seconds_bucket{le=\"0.5\"} 2\n"
            "h_seconds_bucket{le=\"+Inf\"} 3\n"
            "h_seconds_sum 3.2509765625\n"
            "h_seconds_count 3\n");
}

TEST(PrometheusTextTest, NumbersUseGoSyntax) {
  EXPECT_EQ(observe::PrometheusNumber(1e-5), "1e-05");
  EXPECT_EQ(observe::PrometheusNumber(1024), "1024");
  EXPECT_EQ(observe::PrometheusNumber(0.1), "0.1");
  EXPECT_EQ(observe::PrometheusNumber(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(observe::PrometheusNumber(std::nan("")), "NaN");
}

TEST(MetricsTest, CountsCollectivesRequestsAndBytesByCollectiveAndDtype) {
  observe::Metrics metrics("");
  metrics.JobStarted();
  exec::FusedBatch batch;
  batch.tensors.push_back(
      Tensor(v1::COLLECTIVE_ALLREDUCE, v1::DATA_TYPE_FLOAT32, {400, 400, 400}, {}));
  batch.tensors.push_back(
      Tensor(v1::COLLECTIVE_ALLREDUCE, v1::DATA_TYPE_FLOAT32, {40, 40, 40}, {}));
  batch.bytes = 512;
  metrics.BatchCompleted(batch, Took(std::chrono::milliseconds(3)));
  exec::FusedBatch gather;
  gather.tensors.push_back(Tensor(v1::COLLECTIVE_ALLGATHER, v1::DATA_TYPE_INT64, {8, 16, 24}, {}));
  gather.bytes = 64;
  metrics.BatchCompleted(gather, Took(std::chrono::microseconds(50)));
  metrics.ControlCompleted(Tensor(v1::COLLECTIVE_BARRIER, v1::DATA_TYPE_UNSPECIFIED, {0, 0, 0},
                                  std::chrono::seconds(2)));
  metrics.RequestFailed(absl::InvalidArgumentError("no"));
  metrics.RequestFailed(absl::InvalidArgumentError("no"));
  metrics.RequestFailed(absl::AbortedError("dead"));

  const std::string text =
      metrics.Render({.job_state = "running", .load = {.clients_connected = 3}});
  for (const char* line : {
           "collectived_collectives_total{collective=\"allreduce\",dtype=\"float32\"} 2\n",
           "collectived_requests_total{collective=\"allreduce\",dtype=\"float32\"} 6\n",
           "collectived_bytes_total{collective=\"allreduce\",dtype=\"float32\"} 1320\n",
           "collectived_collectives_total{collective=\"allgather\",dtype=\"int64\"} 1\n",
           "collectived_bytes_total{collective=\"allgather\",dtype=\"int64\"} 48\n",
           "collectived_collectives_total{collective=\"barrier\",dtype=\"none\"} 1\n",
           "collectived_requests_total{collective=\"barrier\",dtype=\"none\"} 3\n",
           "collectived_bytes_total{collective=\"barrier\",dtype=\"none\"} 0\n",
           "collectived_errors_total{kind=\"invalid_argument\"} 2\n",
           "collectived_errors_total{kind=\"aborted\"} 1\n",
           // Two batches: 1 ms < 3 ms <= 10 ms, and 50 us <= 100 us.
           "collectived_reduction_seconds_bucket{le=\"0.0001\"} 1\n",
           "collectived_reduction_seconds_bucket{le=\"0.001\"} 1\n",
           "collectived_reduction_seconds_bucket{le=\"0.01\"} 2\n",
           "collectived_reduction_seconds_count 2\n",
           // Four tensors waited 0, 0, 0 and 2 s.
           "collectived_negotiation_wait_seconds_bucket{le=\"1e-05\"} 3\n",
           "collectived_negotiation_wait_seconds_bucket{le=\"1\"} 3\n",
           "collectived_negotiation_wait_seconds_bucket{le=\"10\"} 4\n",
           "collectived_negotiation_wait_seconds_sum 2\n",
           "collectived_fusion_batch_tensors_bucket{le=\"1\"} 1\n",
           "collectived_fusion_batch_tensors_bucket{le=\"2\"} 2\n",
           "collectived_fusion_batch_tensors_sum 3\n",
           "collectived_fusion_batch_bytes_sum 576\n",
           "collectived_jobs_started_total 1\n",
           "collectived_job_state{state=\"running\"} 1\n",
           "collectived_job_state{state=\"idle\"} 0\n",
           "collectived_clients_connected 3\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  EXPECT_THAT(text, Not(HasSubstr("collectived_collectives_total{collective=\"broadcast\"")));

  metrics.JobEnded(observe::JobOutcome::kFailed);
  metrics.JobStarted();
  const std::string later = metrics.Render({.job_state = "idle"});
  EXPECT_THAT(later, HasSubstr("collectived_jobs_ended_total{outcome=\"failed\"} 1\n"));
  EXPECT_THAT(later, HasSubstr("collectived_jobs_ended_total{outcome=\"completed\"} 0\n"));
  EXPECT_THAT(later, HasSubstr("collectived_jobs_started_total 2\n"));
}

Metrics::JobSeries Job(std::string id, uint64_t collectives) {
  return {.id = std::move(id),
          .state = "running",
          .ranks = 4,
          .local_ranks = 2,
          .collectives = collectives,
          .requests = 2 * collectives,
          .bytes_reduced = 1024 * collectives,
          .errors = 1,
          .timeline_active = 1,
          .load = {.clients_connected = 2, .stalled_tensors = 1}};
}

TEST(MetricsTest, EachJobsSeriesCarryItsIdAndAJobThatEndedDropsOut) {
  Metrics metrics("");
  // Job ids are the users' strings: the label value is escaped.
  const std::string odd = "a \"quoted\" \\ job\nid";
  const std::string odd_label = "job_id=\"a \\\"quoted\\\" \\\\ job\\nid\"";
  Metrics::Gauges gauges{.job_state = "running",
                         .load = {.clients_connected = 4, .stalled_tensors = 1}};
  gauges.jobs = {Job("first", 3), Job(odd, 5)};
  const std::string both = metrics.Render(gauges);
  for (const std::string& line : {
           std::string("collectived_job_ranks{job_id=\"first\"} 4\n"),
           std::string("collectived_job_local_ranks{job_id=\"first\"} 2\n"),
           std::string("collectived_job_status{job_id=\"first\",state=\"running\"} 1\n"),
           std::string("collectived_job_status{job_id=\"first\",state=\"failed\"} 0\n"),
           std::string("collectived_job_collectives_total{job_id=\"first\"} 3\n"),
           std::string("collectived_job_requests_total{job_id=\"first\"} 6\n"),
           std::string("collectived_job_bytes_reduced_total{job_id=\"first\"} 3072\n"),
           std::string("collectived_job_errors_total{job_id=\"first\"} 1\n"),
           std::string("collectived_job_clients_connected{job_id=\"first\"} 2\n"),
           std::string("collectived_job_stalled_tensors{job_id=\"first\"} 1\n"),
           std::string("collectived_job_timeline_active{job_id=\"first\"} 1\n"),
           absl::StrCat("collectived_job_collectives_total{", odd_label, "} 5\n"),
           absl::StrCat("collectived_job_status{", odd_label, ",state=\"running\"} 1\n"),
           // The daemon-wide series stay as they were.
           std::string("collectived_clients_connected 4\n"),
           std::string("collectived_stalled_tensors 1\n"),
       }) {
    EXPECT_THAT(both, HasSubstr(line));
  }

  // The first job ended: its series go, the other's stay.
  gauges.jobs = {Job(odd, 6)};
  const std::string one = metrics.Render(gauges);
  EXPECT_THAT(one, Not(HasSubstr("job_id=\"first\"")));
  EXPECT_THAT(one,
              HasSubstr(absl::StrCat("collectived_job_collectives_total{", odd_label, "} 6\n")));

  // No job: the families are declared, with no sample.
  const std::string none = metrics.Render({.job_state = "idle"});
  EXPECT_THAT(none, HasSubstr("# TYPE collectived_job_collectives_total counter\n"));
  EXPECT_THAT(none, Not(HasSubstr("job_id=")));
}

TEST(MetricsTest, ErrorKindsAreLowerCaseStatusCodes) {
  EXPECT_EQ(observe::ErrorKind(absl::StatusCode::kFailedPrecondition), "failed_precondition");
  EXPECT_EQ(observe::ErrorKind(absl::StatusCode::kDeadlineExceeded), "deadline_exceeded");
}

}  // namespace
}  // namespace collective::daemon::observe
