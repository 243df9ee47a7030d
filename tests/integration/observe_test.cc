// What an operator observes, with a real daemon and real client processes:
// the stall inspector (a tensor the last rank never submits is reported in
// the log and in `collectivectl status`, then failed on every rank that
// submitted it, and the job goes on) and the timeline (recorded from the
// client API, from collectivectl and from the configuration, then loaded
// with a JSON parser and checked phase by phase for known tensors).
#include <algorithm>
#include <filesystem>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/common/trace_reader.h"
#include "tests/integration/collectives_job.h"

namespace collective::testing {
namespace {

using ::testing::AllOf;

// Timestamps are microseconds with nanosecond decimals: sums of two of them
// may round differently from the one they should equal.
constexpr double kRounding = 0.002;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(60);

std::vector<std::string> Flags(std::vector<std::string> extra) {
  std::vector<std::string> flags = SmallMemoryFlags();
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// collectivectl against `socket`: exit code and output.
struct CtlResult {
  int exit_code = -1;
  std::string out;
};
CtlResult Ctl(const std::string& socket, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {CollectivectlBinary(), "--socket", socket};
  argv.insert(argv.end(), args.begin(), args.end());
  CtlResult result;
  auto process = Subprocess::Start(argv);
  if (!process.ok()) {
    result.out = process.status().ToString();
    return result;
  }
  const auto status = process->Wait(absl::Seconds(15));
  if (status.has_value() && WIFEXITED(*status)) result.exit_code = WEXITSTATUS(*status);
  result.out = process->Stdout() + process->Stderr();
  return result;
}

// --- Stall inspector ---------------------------------------------------------

class StallTest : public ::testing::TestWithParam<int> {};

TEST_P(StallTest, ReportedThenFailedOnEveryRankAndTheJobGoesOn) {
  const int clients = GetParam();
  const int missing = clients - 1;
  auto daemon = DaemonProcess::Start(
      {.flags = Flags({"--stall-check-seconds", "1", "--stall-shutdown-seconds", "3"})});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto workers = (*daemon)->StartWorkers(CollectivesWorkerBinary(), clients, {"stall"});
  ASSERT_TRUE(workers.ok()) << workers.status();

  // Between the check and the shutdown limit the tensor is reported stalled,
  // waiting for the last rank only.
  const auto stalled = (*daemon)->AwaitStatus(
      [&](const v1::StatusResponse& status) {
        return std::any_of(status.pending().begin(), status.pending().end(),
                           [](const v1::PendingTensor& tensor) {
                             return tensor.name() == "stalled.tensor" && tensor.stalled();
                           });
      },
      kTimeout);
  ASSERT_TRUE(stalled.ok()) << stalled.status();
  const v1::PendingTensor& tensor = stalled->pending(0);
  EXPECT_EQ(tensor.collective(), v1::COLLECTIVE_ALLREDUCE);
  EXPECT_THAT(tensor.missing_ranks(), ::testing::ElementsAre(missing));
  EXPECT_EQ(tensor.ready_ranks_size(), clients - 1);
  const CtlResult table = Ctl((*daemon)->socket(), {"status"});
  EXPECT_EQ(table.exit_code, 0) << table.out;
  EXPECT_THAT(table.out, HasSubstr("STALLED")) << table.out;

  EXPECT_EQ(WaitForWorkers(*workers, kTimeout), "");
  // Every rank that submitted it was told why; the last rank never saw it.
  for (int rank = 0; rank < missing; ++rank) {
    EXPECT_THAT((*workers)[rank].Stdout(),
                AllOf(HasSubstr("DEADLINE_EXCEEDED"),
                      HasSubstr(absl::StrCat("tensor 'stalled.tensor' of process set 0 waited")),
                      HasSubstr(absl::StrCat("for ranks [", missing, "] to submit it")),
                      HasSubstr("stall_shutdown_seconds is 3")))
        << "rank " << rank;
  }
  for (int rank = 0; rank < clients; ++rank) {
    EXPECT_THAT((*workers)[rank].Stdout(), HasSubstr("ok after the stall")) << "rank " << rank;
  }
  // The log carries Horovod's "Missing ranks" report.
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop()));
  EXPECT_THAT((*daemon)->process().Stderr(),
              HasSubstr(absl::StrCat("Missing ranks:\n", missing, ": [stalled.tensor]")));
}

INSTANTIATE_TEST_SUITE_P(Clients, StallTest, ::testing::Values(2, 3),
                         [](const auto& test) { return absl::StrCat(test.param, "Clients"); });

// --- Timeline ----------------------------------------------------------------

// Who starts the recording: a rank through the client API (its job's own
// timeline), collectivectl (the daemon's), the daemon's configuration, or
// HOROVOD_TIMELINE in the ranks' environment (the job's own).
enum class Recorder { kClientApi, kCollectivectl, kConfig, kJobEnvironment };

void PrintTo(Recorder recorder, std::ostream* os) {
  switch (recorder) {
    case Recorder::kClientApi:
      *os << "ClientApi";
      break;
    case Recorder::kCollectivectl:
      *os << "Collectivectl";
      break;
    case Recorder::kConfig:
      *os << "Config";
      break;
    case Recorder::kJobEnvironment:
      *os << "JobEnvironment";
      break;
  }
}

class TimelineRecordingTest : public ::testing::TestWithParam<Recorder> {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() /
                 absl::StrCat("cld-timeline-", getpid(), "-", counter_++);
    std::filesystem::create_directories(directory_);
    path_ = (directory_ / "trace.json").string();
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  // The tensor's pid in the trace, or -1.
  static int64_t PidOf(const std::vector<TraceEvent>& events, const std::string& tensor) {
    for (const auto& [name, pid] : TraceProcesses(events)) {
      if (name == tensor) return pid;
    }
    return -1;
  }

  // The phases every tensor has: the negotiation with one arrival mark per
  // rank inside it, then the queue wait and the op's own phase in order.
  static void ExpectDaemonPhases(const std::vector<TraceEvent>& events, const std::string& tensor,
                                 const std::string& negotiate, const std::string& phase,
                                 int clients, double bytes) {
    SCOPED_TRACE(tensor);
    const int64_t pid = PidOf(events, tensor);
    ASSERT_GE(pid, 0) << "no process for the tensor";
    const auto negotiation = SelectEvents(events, negotiate, "X", pid);
    ASSERT_EQ(negotiation.size(), 1u);
    const double begin = negotiation[0].ts;
    const double end = begin + negotiation[0].dur;
    for (int rank = 0; rank < clients; ++rank) {
      const auto arrival = SelectEvents(events, absl::StrCat("rank ", rank), "i", pid);
      ASSERT_EQ(arrival.size(), 1u) << "rank " << rank;
      EXPECT_EQ(arrival[0].NumberArg("rank"), rank);
      EXPECT_GE(arrival[0].ts, begin - kRounding) << "rank " << rank;
      EXPECT_LE(arrival[0].ts, end + kRounding) << "rank " << rank;
    }
    const auto queue = SelectEvents(events, "QUEUE", "X", pid);
    ASSERT_EQ(queue.size(), 1u);
    EXPECT_GE(queue[0].ts, end - kRounding);
    const auto work = SelectEvents(events, phase, "X", pid);
    ASSERT_EQ(work.size(), 1u);
    EXPECT_GE(work[0].ts, queue[0].ts + queue[0].dur - kRounding);
    EXPECT_EQ(work[0].NumberArg("bytes"), bytes);
  }

  // Each rank's copy-out of `tensor`, on the row named after it.
  static void ExpectCopyOuts(const std::vector<TraceEvent>& events, const std::string& tensor,
                             int clients) {
    SCOPED_TRACE(tensor);
    const int64_t pid = PidOf(events, tensor);
    ASSERT_GE(pid, 0);
    const auto copies = SelectEvents(events, "COPY_OUT", "X", pid);
    ASSERT_EQ(copies.size(), static_cast<size_t>(clients));
    const auto work_end = [&] {
      double latest = 0;
      for (const TraceEvent& event : events) {
        if (event.pid == pid && event.tid == 0 && event.ph == "X") {
          latest = std::max(latest, event.ts + event.dur);
        }
      }
      return latest;
    }();
    std::vector<std::string> rows;
    for (const TraceEvent& copy : copies) {
      EXPECT_GE(copy.ts, work_end - kRounding);
      for (const TraceEvent& name : SelectEvents(events, "thread_name", "M", pid)) {
        if (name.tid == copy.tid) rows.push_back(name.StringArg("name"));
      }
    }
    std::sort(rows.begin(), rows.end());
    std::vector<std::string> expected;
    for (int rank = 0; rank < clients; ++rank) expected.push_back(absl::StrCat("rank ", rank));
    EXPECT_EQ(rows, expected);
  }

  static inline int counter_ = 0;
  std::filesystem::path directory_;
  std::string path_;
};

TEST_P(TimelineRecordingTest, RecordsTheNegotiationPhasesAndCopyOutsOfKnownTensors) {
  constexpr int kClients = 3;
  const Recorder recorder = GetParam();
  std::vector<std::string> flags = Flags({});
  if (recorder == Recorder::kConfig) {
    flags.insert(flags.end(), {"--timeline-file", path_, "--timeline-mark-cycles", "true"});
  }
  auto daemon = DaemonProcess::Start({.flags = flags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::vector<std::string> args = {"timeline"};
  if (recorder == Recorder::kClientApi)
    args.insert(args.end(), {"--start", path_, "--mark-cycles"});
  if (recorder == Recorder::kCollectivectl) {
    const CtlResult start = Ctl((*daemon)->socket(), {"timeline", "start", path_, "--mark-cycles"});
    ASSERT_EQ(start.exit_code, 0) << start.out;
  }
  std::map<std::string, std::string> environment;
  if (recorder == Recorder::kJobEnvironment) {
    environment = {{"HOROVOD_TIMELINE", path_}, {"HOROVOD_TIMELINE_MARK_CYCLES", "1"}};
  }
  auto workers = (*daemon)->StartWorkers(CollectivesWorkerBinary(), kClients, args, environment);
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, kTimeout), "");
  if (recorder == Recorder::kCollectivectl) {
    const CtlResult stop = Ctl((*daemon)->socket(), {"timeline", "stop"});
    ASSERT_EQ(stop.exit_code, 0) << stop.out;
  }
  if (recorder == Recorder::kConfig) {
    // Recording from start-up ends with the daemon, which completes the file.
    ASSERT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  } else if (recorder == Recorder::kCollectivectl) {
    const auto status = (*daemon)->Status();
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_FALSE(status->timeline().active());
    EXPECT_EQ(status->timeline().path(), path_);
  } else {
    // The job's own timeline: rank 0 stopped it, or it ends with the job,
    // which completes the file; the daemon's never recorded.
    const auto status = (*daemon)->AwaitStatus(
        [](const v1::StatusResponse& s) { return s.jobs().empty(); }, kTimeout);
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(status->timeline().path(), "");
  }

  const absl::StatusOr<std::vector<TraceEvent>> events = ReadTrace(path_);
  ASSERT_TRUE(events.ok()) << events.status();
  // tl.allreduce: 1000 float32 per rank, reduced, copied out by every rank.
  ExpectDaemonPhases(*events, "tl.allreduce", "NEGOTIATE_ALLREDUCE", "REDUCE", kClients,
                     kClients * 1000 * 4);
  ExpectCopyOuts(*events, "tl.allreduce", kClients);
  // tl.allgather: rank m sends m + 1 rows of 4 int32.
  ExpectDaemonPhases(*events, "tl.allgather", "NEGOTIATE_ALLGATHER", "FUSION_COPY", kClients,
                     (1 + 2 + 3) * 4 * 4);
  // tl.broadcast: 77 float64 from the last rank, copied out by every rank.
  ExpectDaemonPhases(*events, "tl.broadcast", "NEGOTIATE_BROADCAST", "FUSION_COPY", kClients,
                     kClients * 77 * 8);
  ExpectCopyOuts(*events, "tl.broadcast", kClients);
  EXPECT_FALSE(SelectEvents(*events, "CYCLE", "i").empty()) << "cycle marks were asked for";
}

INSTANTIATE_TEST_SUITE_P(Recorders, TimelineRecordingTest,
                         ::testing::Values(Recorder::kClientApi, Recorder::kCollectivectl,
                                           Recorder::kConfig, Recorder::kJobEnvironment),
                         [](const auto& test) {
                           std::ostringstream name;
                           PrintTo(test.param, &name);
                           return name.str();
                         });

}  // namespace
}  // namespace collective::testing
