// The daemon as a service, seen as an operator's tools see it, with a real
// daemon and real client processes: what systemd hears (READY=1, STATUS=,
// STOPPING=1 on a test-owned notify socket), the Prometheus metrics of
// `collectivectl metrics` and of the HTTP endpoint counted against a known
// workload, the gauges of a stalled and then failed job, and the JSON log
// lines with their stable fields and the job's summary.
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/dtype.h"
#include "tests/common/temporary_directory.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/metrics_scrape.h"

namespace collective::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr absl::Duration kTimeout = absl::Seconds(30);

std::string CollectivesWorker() { return COLLECTIVES_WORKER_BINARY; }

std::vector<std::string> SmallMemoryFlagsAnd(const std::vector<std::string>& more) {
  std::vector<std::string> flags = SmallMemoryFlags();
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

// A datagram socket standing in for systemd's notify socket.
class NotifyListener {
 public:
  NotifyListener() : path_(directory_.path() + "/notify") {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~NotifyListener() {
    if (fd_ >= 0) ::close(fd_);
  }

  bool ok() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

  // The next notification, or nullopt when none came before the deadline.
  std::optional<std::string> Next(absl::Time deadline) {
    pollfd readable = {fd_, POLLIN, 0};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0 || ::poll(&readable, 1, static_cast<int>(left)) <= 0) return std::nullopt;
    char buffer[4096];
    const ssize_t got = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (got < 0) return std::nullopt;
    return std::string(buffer, static_cast<size_t>(got));
  }

  // Notifications until one contains `text` (which is returned last), or
  // the deadline.
  std::vector<std::string> Until(absl::string_view text, absl::Time deadline) {
    std::vector<std::string> seen;
    while (std::optional<std::string> next = Next(deadline)) {
      seen.push_back(*next);
      if (absl::StrContains(*next, text)) break;
    }
    return seen;
  }

 private:
  TemporaryDirectory directory_{"notify"};
  std::string path_;
  int fd_ = -1;
};

TEST(SystemdNotifyTest, ReadyThenJobStatesThenStopping) {
  NotifyListener notify;
  ASSERT_TRUE(notify.ok());
  auto daemon = DaemonProcess::Start(
      {.flags = SmallMemoryFlags(), .environment = {{"NOTIFY_SOCKET", notify.path()}}});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const absl::Time deadline = absl::Now() + kTimeout;

  // Health answered, so READY=1 was sent: it is the first notification.
  const std::optional<std::string> ready = notify.Next(deadline);
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(*ready, absl::StrCat("READY=1\nSTATUS=idle, serving ", (*daemon)->socket()));

  auto workers = (*daemon)->StartWorkers(CollectivesWorker(), 2,
                                         {"workload", "--ops", "allreduce:float32:10:1"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  const std::vector<std::string> job = notify.Until("STATUS=idle", deadline);
  EXPECT_EQ(WaitForWorkers(*workers, kTimeout), "");
  ASSERT_FALSE(job.empty());
  EXPECT_EQ(job.back(), absl::StrCat("STATUS=idle, serving ", (*daemon)->socket()))
      << absl::StrJoin(job, " | ");
  EXPECT_THAT(job, ::testing::Contains("STATUS=job 'default' running with 2 clients"))
      << absl::StrJoin(job, " | ");
  for (size_t i = 0; i + 1 < job.size(); ++i) {
    EXPECT_THAT(job[i], StartsWith("STATUS=job 'default' ")) << absl::StrJoin(job, " | ");
  }

  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  const std::optional<std::string> stopping = notify.Next(deadline);
  ASSERT_TRUE(stopping.has_value());
  EXPECT_EQ(*stopping, "STOPPING=1\nSTATUS=stopping: received SIGTERM");
  EXPECT_EQ(notify.Next(absl::Now()), std::nullopt) << "nothing after STOPPING=1";
}

// systemd's watchdog hears from the engine loop itself, idle or not, every
// half of WATCHDOG_USEC: an engine that wedges stops the pings.
TEST(SystemdNotifyTest, WatchdogPingsComeFromTheEngineLoop) {
  NotifyListener notify;
  ASSERT_TRUE(notify.ok());
  auto daemon = DaemonProcess::Start(
      {.flags = SmallMemoryFlags(),
       .environment = {{"NOTIFY_SOCKET", notify.path()}, {"WATCHDOG_USEC", "200000"}}});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const absl::Time deadline = absl::Now() + kTimeout;
  for (int i = 0; i < 3; ++i) {  // idle, it pings all the same
    const std::vector<std::string> seen = notify.Until("WATCHDOG=1", deadline);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back(), "WATCHDOG=1");
  }
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

// --- Metrics ---------------------------------------------------------------

// One entry of the workload (see collectives_worker_workload.cc).
struct WorkloadOp {
  std::string kind;
  v1::DataType dtype;
  int64_t count;
  int times;
};

std::string Spec(const std::vector<WorkloadOp>& ops) {
  std::vector<std::string> specs;
  for (const WorkloadOp& op : ops) {
    specs.push_back(absl::StrCat(
        op.kind, ":", op.dtype == v1::DATA_TYPE_UNSPECIFIED ? "none" : DataTypeName(op.dtype), ":",
        op.count, ":", op.times));
  }
  return absl::StrJoin(specs, ",");
}

// What the daemon must count for a workload of `ranks` ranks, by series.
struct Expected {
  std::map<std::string, double> series;
  double collectives = 0;
  double data_collectives = 0;
  double batches = 0;
  double requests = 0;
  double bytes = 0;
  double errors = 0;
};

Expected ExpectedFor(const std::vector<WorkloadOp>& ops, int ranks) {
  Expected expected;
  for (const WorkloadOp& op : ops) {
    if (op.kind == "mismatch") {
      expected.errors += ranks * op.times;
      continue;
    }
    const std::string collective = op.kind == "grouped" ? "allreduce" : op.kind;
    const std::string dtype = op.kind == "barrier" ? "none" : DataTypeName(op.dtype);
    const std::string labels =
        absl::StrCat("{collective=\"", collective, "\",dtype=\"", dtype, "\"}");
    const double bytes = op.kind == "barrier" ? 0.0
                                              : static_cast<double>(ranks) * op.times * op.count *
                                                    static_cast<double>(ElementSize(op.dtype));
    expected.series["collectived_collectives_total" + labels] += op.times;
    expected.series["collectived_requests_total" + labels] += ranks * op.times;
    expected.series["collectived_bytes_total" + labels] += bytes;
    expected.collectives += op.times;
    expected.requests += ranks * op.times;
    expected.bytes += bytes;
    if (op.kind != "barrier") {
      expected.data_collectives += op.times;
      // A group is ready at once and fused into one batch; the others run
      // one after the other, a batch each.
      expected.batches += op.kind == "grouped" ? 1 : op.times;
    }
  }
  return expected;
}

// Every series of `samples` whose name starts with `prefix`.
std::map<std::string, double> Family(const std::map<std::string, double>& samples,
                                     absl::string_view prefix) {
  std::map<std::string, double> family;
  for (const auto& [series, value] : samples) {
    if (absl::StartsWith(series, prefix)) family[series] = value;
  }
  return family;
}

absl::StatusOr<std::map<std::string, double>> ScrapeCli(const DaemonProcess& daemon) {
  const CommandResult run = RunCollectivectl(daemon.socket(), {"metrics"});
  if (run.exit_code != 0) return absl::UnavailableError(run.err);
  return ParseSamples(run.out);
}

// Each line of the daemon's stderr as a JSON object.
std::vector<google::protobuf::Struct> JsonLines(const std::string& text) {
  std::vector<google::protobuf::Struct> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    google::protobuf::Struct object;
    const auto parsed = google::protobuf::util::JsonStringToMessage(std::string(line), &object);
    EXPECT_TRUE(parsed.ok()) << parsed.ToString() << ": " << line;
    for (const char* field : {"ts", "level", "subsystem", "rank", "tensor", "msg"}) {
      EXPECT_TRUE(object.fields().contains(field)) << field << " missing from " << line;
    }
    lines.push_back(std::move(object));
  }
  return lines;
}

// The line whose msg starts with `prefix`.
const google::protobuf::Struct* LineWithMessage(const std::vector<google::protobuf::Struct>& lines,
                                                absl::string_view prefix) {
  for (const google::protobuf::Struct& line : lines) {
    if (absl::StartsWith(line.fields().at("msg").string_value(), prefix)) return &line;
  }
  return nullptr;
}

TEST(MetricsTest, CountEveryOperationAndByteOfAKnownWorkload) {
  auto daemon = DaemonProcess::Start(
      {.flags = SmallMemoryFlagsAnd({"--metrics-listen", "127.0.0.1:0", "--log-format", "json"})});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  constexpr int kRanks = 3;
  const std::vector<WorkloadOp> ops = {
      {"allreduce", v1::DATA_TYPE_FLOAT32, 1000, 3},
      {"allreduce", v1::DATA_TYPE_INT64, 257, 2},
      {"allgather", v1::DATA_TYPE_INT32, 10, 2},
      {"broadcast", v1::DATA_TYPE_FLOAT64, 100, 1},
      {"alltoall", v1::DATA_TYPE_INT16, 6, 2},
      {"reducescatter", v1::DATA_TYPE_FLOAT32, 12, 1},
      {"grouped", v1::DATA_TYPE_FLOAT32, 100, 4},
      {"mismatch", v1::DATA_TYPE_FLOAT32, 16, 1},
      {"barrier", v1::DATA_TYPE_UNSPECIFIED, 0, 2},
  };
  auto workers =
      (*daemon)->StartWorkers(CollectivesWorker(), kRanks, {"workload", "--ops", Spec(ops)});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");
  auto idle = (*daemon)->AwaitStatus(
      [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; }, kTimeout);
  ASSERT_TRUE(idle.ok()) << idle.status();

  auto samples = ScrapeCli(**daemon);
  ASSERT_TRUE(samples.ok()) << samples.status();
  const Expected expected = ExpectedFor(ops, kRanks);
  std::map<std::string, double> counted;
  for (const char* family :
       {"collectived_collectives_total", "collectived_requests_total", "collectived_bytes_total"}) {
    const auto found = Family(*samples, family);
    counted.insert(found.begin(), found.end());
  }
  EXPECT_EQ(counted, expected.series);
  EXPECT_EQ(Family(*samples, "collectived_errors_total"),
            (std::map<std::string, double>{
                {"collectived_errors_total{kind=\"failed_precondition\"}", expected.errors}}));

  const auto& s = *samples;
  EXPECT_EQ(s.at("collectived_negotiation_wait_seconds_count"), expected.collectives);
  EXPECT_EQ(s.at("collectived_negotiation_wait_seconds_bucket{le=\"+Inf\"}"), expected.collectives);
  EXPECT_EQ(s.at("collectived_reduction_seconds_count"), expected.batches);
  EXPECT_EQ(s.at("collectived_fusion_batch_tensors_count"), expected.batches);
  EXPECT_EQ(s.at("collectived_fusion_batch_tensors_sum"), expected.data_collectives);
  EXPECT_EQ(s.at("collectived_fusion_batch_tensors_bucket{le=\"1\"}"), expected.batches - 1);
  EXPECT_EQ(s.at("collectived_fusion_batch_tensors_bucket{le=\"4\"}"), expected.batches);
  EXPECT_EQ(s.at("collectived_jobs_started_total"), 1);
  EXPECT_EQ(s.at("collectived_jobs_ended_total{outcome=\"completed\"}"), 1);
  EXPECT_EQ(s.at("collectived_jobs_ended_total{outcome=\"failed\"}"), 0);
  EXPECT_EQ(s.at("collectived_job_state{state=\"idle\"}"), 1);
  EXPECT_EQ(s.at("collectived_job_state{state=\"running\"}"), 0);
  EXPECT_EQ(s.at("collectived_clients_connected"), 0);

  // The daemon's own totals (collectivectl status) agree.
  const v1::Totals& totals = idle->totals();
  EXPECT_EQ(totals.collectives(), expected.collectives);
  EXPECT_EQ(totals.requests(), expected.requests);
  EXPECT_EQ(totals.bytes_reduced(), expected.bytes);
  EXPECT_EQ(totals.fused_batches(), expected.batches);
  EXPECT_EQ(totals.errors(), expected.errors);

  // The HTTP endpoint serves the same counts.
  const std::string url = idle->metrics_url();
  ASSERT_THAT(url, StartsWith("http://127.0.0.1:"));
  auto http = HttpGet(url, "/metrics");
  ASSERT_TRUE(http.ok()) << http.status();
  EXPECT_EQ(http->code, 200) << http->head;
  EXPECT_THAT(http->head, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  auto served = ParseSamples(http->body);
  ASSERT_TRUE(served.ok()) << served.status();
  // Uptime and the process_* series are the process's state at the moment
  // of each scrape; the process series are served both ways.
  std::map<std::string, double> cli = *samples;
  for (auto* scraped : {&*served, &cli}) {
    EXPECT_TRUE(scraped->contains("process_resident_memory_bytes"));
    EXPECT_TRUE(scraped->contains("process_start_time_seconds"));
    std::erase_if(*scraped, [](const auto& sample) {
      return sample.first == "collectived_uptime_seconds" ||
             absl::StartsWith(sample.first, "process_");
    });
  }
  EXPECT_EQ(*served, cli);

  // Only GET and HEAD of /metrics, and only HTTP.
  auto missing = HttpGet(url, "/other");
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(missing->code, 404);
  auto post = HttpExchange(url, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(post.ok()) << post.status();
  EXPECT_EQ(post->code, 405);
  EXPECT_THAT(post->head, HasSubstr("Allow: GET, HEAD"));
  auto garbage = HttpExchange(url, "hello there\r\n\r\n");
  ASSERT_TRUE(garbage.ok()) << garbage.status();
  EXPECT_EQ(garbage->code, 400);
  auto head = HttpExchange(url, "HEAD /metrics HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->code, 200);
  EXPECT_EQ(head->body, "");

  // The log: JSON lines with the stable fields, the job's start and its
  // summary, and the mismatch attributed to its tensor.
  ASSERT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  const std::vector<google::protobuf::Struct> lines = JsonLines((*daemon)->process().Stderr());
  const auto* started = LineWithMessage(lines, "job started: ");
  ASSERT_NE(started, nullptr) << (*daemon)->process().Stderr();
  EXPECT_EQ(started->fields().at("msg").string_value(),
            "job started: job=\"default\" ranks=3 local_ranks=3 nodes=1 node=0 first_rank=0");
  EXPECT_EQ(started->fields().at("subsystem").string_value(), "coord");
  const auto* ended = LineWithMessage(lines, "job ended: ");
  ASSERT_NE(ended, nullptr) << (*daemon)->process().Stderr();
  const std::string summary = ended->fields().at("msg").string_value();
  EXPECT_THAT(summary, StartsWith("job ended: job=\"default\" result=completed ranks=3 "));
  EXPECT_THAT(summary, HasSubstr(absl::StrCat(
                           " collectives=", expected.collectives, " requests=", expected.requests,
                           " bytes=", expected.bytes, " errors=", expected.errors)));
  EXPECT_EQ(ended->fields().at("level").string_value(), "info");
  const auto* mismatch = LineWithMessage(lines, "Mismatched");
  ASSERT_NE(mismatch, nullptr) << (*daemon)->process().Stderr();
  EXPECT_EQ(mismatch->fields().at("tensor").string_value(), "wl.7.mismatch.0");
  EXPECT_EQ(mismatch->fields().at("level").string_value(), "warning");
  EXPECT_EQ(mismatch->fields().at("rank").kind_case(), google::protobuf::Value::kNullValue);
}

TEST(MetricsTest, GaugesShowAStalledJobThenItsFailure) {
  auto daemon = DaemonProcess::Start(
      {.flags = SmallMemoryFlagsAnd({"--stall-check-seconds", "0.2", "--log-format", "json"})});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  // Rank 1 submits 'victim', rank 0 waits on 'stuck': neither can complete.
  auto job = StartStuckJob(**daemon);
  ASSERT_TRUE(job.ok()) << job.status();

  std::map<std::string, double> samples;
  const absl::Time deadline = absl::Now() + kTimeout;
  while (true) {
    auto scraped = ScrapeCli(**daemon);
    ASSERT_TRUE(scraped.ok()) << scraped.status();
    samples = *scraped;
    if (samples["collectived_stalled_tensors"] == 2) break;
    ASSERT_LT(absl::Now(), deadline) << "never 2 stalled tensors";
    absl::SleepFor(absl::Milliseconds(20));  // polling against the deadline
  }
  EXPECT_EQ(samples["collectived_pending_tensors"], 2);
  EXPECT_EQ(samples["collectived_outstanding_requests"], 2);
  EXPECT_EQ(samples["collectived_clients_connected"], 2);
  EXPECT_EQ(samples["collectived_job_state{state=\"running\"}"], 1);
  EXPECT_EQ(samples["collectived_result_arena_bytes"], 4 << 20);

  ASSERT_EQ(EndStuckJob(*job, **daemon, kTimeout), "");
  auto after = ScrapeCli(**daemon);
  ASSERT_TRUE(after.ok()) << after.status();
  // Both pending requests failed with the death of rank 1.
  EXPECT_EQ(Family(*after, "collectived_errors_total"),
            (std::map<std::string, double>{{"collectived_errors_total{kind=\"aborted\"}", 2}}));
  EXPECT_EQ(after->at("collectived_jobs_ended_total{outcome=\"failed\"}"), 1);
  EXPECT_EQ(after->at("collectived_stalled_tensors"), 0);
  EXPECT_EQ(after->at("collectived_clients_connected"), 0);

  ASSERT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  const std::vector<google::protobuf::Struct> lines = JsonLines((*daemon)->process().Stderr());
  const auto* died = LineWithMessage(lines, "job 'default': rank 1 ");
  ASSERT_NE(died, nullptr) << (*daemon)->process().Stderr();
  EXPECT_EQ(died->fields().at("rank").number_value(), 1);
  const auto* ended = LineWithMessage(lines, "job ended: ");
  ASSERT_NE(ended, nullptr);
  EXPECT_THAT(ended->fields().at("msg").string_value(), HasSubstr("result=failed ranks=2 "));
  EXPECT_THAT(ended->fields().at("msg").string_value(), HasSubstr(" failure=\"rank 1 (pid "));
  EXPECT_EQ(ended->fields().at("level").string_value(), "warning");
}

}  // namespace
}  // namespace collective::testing
