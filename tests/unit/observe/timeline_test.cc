#include "daemon/observe/timeline.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "daemon/observe/trace_event.h"
#include "tests/common/trace_reader.h"

namespace collective::daemon::observe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

using Event = collective::testing::TraceEvent;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The file's events; a file that does not parse fails the test.
std::vector<Event> ParseTrace(const std::string& path) {
  absl::StatusOr<std::vector<Event>> events = collective::testing::ReadTrace(path);
  EXPECT_TRUE(events.ok()) << events.status();
  return events.ok() ? *std::move(events) : std::vector<Event>{};
}

std::vector<Event> Select(const std::vector<Event>& events, const std::string& name,
                          const std::string& ph, int64_t pid = -1) {
  return collective::testing::SelectEvents(events, name, ph, pid);
}

std::vector<std::pair<std::string, int64_t>> Processes(const std::vector<Event>& events) {
  return collective::testing::TraceProcesses(events);
}

// The calling thread's file-system uid and gid and its supplementary groups,
// from the kernel's view of this very thread.
struct ThreadIdentity {
  std::string fsuid;
  std::string fsgid;
  std::string groups;
  friend bool operator==(const ThreadIdentity&, const ThreadIdentity&) = default;
};
void PrintTo(const ThreadIdentity& id, std::ostream* os) {
  *os << "fsuid " << id.fsuid << " fsgid " << id.fsgid << " groups [" << id.groups << "]";
}

ThreadIdentity CurrentThreadIdentity() {
  ThreadIdentity identity;
  std::ifstream in("/proc/thread-self/status");
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> fields = absl::StrSplit(line, '\t', absl::SkipEmpty());
    if (fields.size() >= 5 && fields[0] == "Uid:") identity.fsuid = fields[4];
    if (fields.size() >= 5 && fields[0] == "Gid:") identity.fsgid = fields[4];
    if (absl::StartsWith(line, "Groups:")) identity.groups = line.substr(7);
  }
  return identity;
}

job::PeerCredentials Me() { return {getpid(), geteuid(), getegid()}; }
job::PeerCredentials Nobody() { return {getpid(), kNobody, kNogroup}; }

class TimelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrReplaceAll(absl::StrCat("timeline_test_", getpid(), "_",
                                            test->test_suite_name(), "_", test->name()),
                               {{"/", "_"}});
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string PathOf(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

TEST_F(TimelineTest, RecordsEveryKindOfEvent) {
  const std::string path = PathOf("trace.json");
  std::ofstream(path) << "left over from an earlier run, longer than nothing";
  observe::Timeline timeline;
  EXPECT_FALSE(timeline.active());

  const uint64_t before = MonotonicNanos();
  ASSERT_TRUE(timeline.Start(path, /*mark_cycles=*/true, Me()).ok());
  const uint64_t after = MonotonicNanos();
  EXPECT_TRUE(timeline.active());
  EXPECT_TRUE(timeline.mark_cycles());
  EXPECT_EQ(timeline.path(), path);

  const uint64_t t0 = after + 1'000'000;  // 1 ms after Start
  const std::vector<observe::RankArrival> arrivals = {{0, t0}, {2, t0 + 2'500}, {1, t0 + 4'000}};
  timeline.Negotiation("layer1.weight", v1::COLLECTIVE_ALLREDUCE, t0, t0 + 4'000, arrivals);
  timeline.Phase("layer1.weight", exec::kPhaseQueue, t0 + 4'000, t0 + 5'000, 4096);
  timeline.Phase("layer1.weight", exec::kPhaseFusionCopy, t0 + 5'000, t0 + 6'000, 4096);
  timeline.Phase("layer1.weight", exec::kPhaseReduce, t0 + 6'000, t0 + 9'000, 4096);
  timeline.Phase("layer1.weight", exec::kPhaseCrossNode, t0 + 9'000, t0 + 12'000, 4096);
  for (int32_t rank : {0, 1, 2}) {
    timeline.CopyOut("layer1.weight", rank, t0 + 12'000, t0 + 13'000 + rank);
  }
  timeline.CopyOut("layer1.weight", 0, t0 + 20'000, t0 + 21'000);  // a second step
  timeline.Cycle(t0 + 14'000);
  const std::string odd = "a\"b\\c";
  timeline.Negotiation(odd, v1::COLLECTIVE_BROADCAST, t0, t0 + 1'000, {});
  // From before Start: clipped to 0; an end before its start: no duration.
  timeline.Phase("early", exec::kPhaseReduce, 0, 1, 8);
  timeline.Phase("early", exec::kPhaseCopyOut, t0 + 7'000, t0 + 6'000, 8);
  ASSERT_TRUE(timeline.Stop().ok());
  EXPECT_FALSE(timeline.active());
  EXPECT_EQ(timeline.path(), path);

  const std::vector<Event> events = ParseTrace(path);
  EXPECT_EQ(timeline.events_written(), events.size());
  // "[", one event per line, "]".
  const std::vector<std::string> lines = absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), events.size() + 2);
  EXPECT_EQ(lines.front(), "[");
  EXPECT_EQ(lines.back(), "]");

  // One process per tensor, numbered and sorted in first-seen order.
  EXPECT_THAT(Processes(events), ElementsAre(std::pair<std::string, int64_t>{"layer1.weight", 1},
                                             std::pair<std::string, int64_t>{odd, 2},
                                             std::pair<std::string, int64_t>{"early", 3}));
  const std::vector<Event> sort_indices = Select(events, "process_sort_index", "M");
  ASSERT_EQ(sort_indices.size(), 3u);
  for (const Event& event : sort_indices) EXPECT_EQ(event.NumberArg("sort_index"), event.pid);

  // The negotiation span, and each rank's arrival inside it.
  const std::vector<Event> negotiations = Select(events, "NEGOTIATE_ALLREDUCE", "X", 1);
  ASSERT_EQ(negotiations.size(), 1u);
  const Event& negotiation = negotiations[0];
  EXPECT_EQ(negotiation.tid, 0);
  EXPECT_GE(negotiation.ts, static_cast<double>(t0 - after) / 1000 - 1e-6);
  EXPECT_LE(negotiation.ts, static_cast<double>(t0 - before) / 1000 + 1e-6);
  EXPECT_DOUBLE_EQ(negotiation.dur, 4.0);
  for (const observe::RankArrival& arrival : arrivals) {
    SCOPED_TRACE(arrival.rank);
    const std::vector<Event> marks = Select(events, absl::StrCat("rank ", arrival.rank), "i", 1);
    ASSERT_EQ(marks.size(), 1u);
    EXPECT_EQ(marks[0].scope, "t");
    EXPECT_EQ(marks[0].tid, 0);
    EXPECT_EQ(marks[0].NumberArg("rank"), arrival.rank);
    EXPECT_NEAR(marks[0].ts - negotiation.ts, static_cast<double>(arrival.at_ns - t0) / 1000, 1e-6);
  }

  // The daemon's phases, with their sizes.
  const std::vector<std::pair<absl::string_view, double>> phases = {{exec::kPhaseQueue, 1.0},
                                                                    {exec::kPhaseFusionCopy, 1.0},
                                                                    {exec::kPhaseReduce, 3.0},
                                                                    {exec::kPhaseCrossNode, 3.0}};
  for (const auto& [phase, duration] : phases) {
    SCOPED_TRACE(phase);
    const std::vector<Event> spans = Select(events, std::string(phase), "X", 1);
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_EQ(spans[0].tid, 0);
    EXPECT_EQ(spans[0].NumberArg("bytes"), 4096);
    EXPECT_DOUBLE_EQ(spans[0].dur, duration);
  }

  // Copy-out: a row per rank, named once, however many copy-outs it shows.
  const std::vector<Event> copy_outs = Select(events, "COPY_OUT", "X", 1);
  ASSERT_EQ(copy_outs.size(), 4u);
  std::map<int64_t, int> copy_outs_per_row;
  for (const Event& event : copy_outs) ++copy_outs_per_row[event.tid];
  EXPECT_THAT(copy_outs_per_row,
              ElementsAre(std::pair<const int64_t, int>{1, 2}, std::pair<const int64_t, int>{2, 1},
                          std::pair<const int64_t, int>{3, 1}));
  EXPECT_DOUBLE_EQ(copy_outs[2].dur, 1.002);  // rank 2: 1002 ns
  std::map<int64_t, std::string> row_names;
  for (const Event& event : Select(events, "thread_name", "M", 1)) {
    EXPECT_TRUE(row_names.emplace(event.tid, event.StringArg("name")).second)
        << "row " << event.tid << " named twice";
  }
  EXPECT_THAT(row_names, ElementsAre(std::pair<const int64_t, std::string>{0, "daemon"},
                                     std::pair<const int64_t, std::string>{1, "rank 0"},
                                     std::pair<const int64_t, std::string>{2, "rank 1"},
                                     std::pair<const int64_t, std::string>{3, "rank 2"}));

  const std::vector<Event> cycles = Select(events, "CYCLE", "i");
  ASSERT_EQ(cycles.size(), 1u);
  EXPECT_EQ(cycles[0].scope, "g");

  // The odd name is escaped in the file and reads back intact.
  EXPECT_THAT(ReadFile(path), HasSubstr(R"("name":"a\"b\\c")"));
  EXPECT_EQ(Select(events, "NEGOTIATE_BROADCAST", "X", 2).size(), 1u);

  const std::vector<Event> early = Select(events, "REDUCE", "X", 3);
  ASSERT_EQ(early.size(), 1u);
  EXPECT_EQ(early[0].ts, 0.0);
  EXPECT_EQ(early[0].dur, 0.0);
  const std::vector<Event> backwards = Select(events, "COPY_OUT", "X", 3);
  ASSERT_EQ(backwards.size(), 1u);
  EXPECT_EQ(backwards[0].dur, 0.0);
  for (const Event& event : events) {
    if (event.ph == "M") continue;
    EXPECT_GE(event.ts, 0.0) << event.name;
    if (event.ph == "X") {
      EXPECT_GE(event.dur, 0.0) << event.name;
    }
  }
}

TEST_F(TimelineTest, MarksCyclesOnlyWhenAskedAndRestartsWithFreshPids) {
  observe::Timeline timeline;
  const std::string first = PathOf("first.json");
  ASSERT_TRUE(timeline.Start(first, /*mark_cycles=*/false, Me()).ok());
  EXPECT_FALSE(timeline.mark_cycles());
  timeline.Phase("x", exec::kPhaseReduce, MonotonicNanos(), MonotonicNanos(), 1);
  timeline.Phase("y", exec::kPhaseReduce, MonotonicNanos(), MonotonicNanos(), 1);
  timeline.Cycle(MonotonicNanos());
  ASSERT_TRUE(timeline.Stop().ok());
  std::vector<Event> events = ParseTrace(first);
  EXPECT_THAT(Select(events, "CYCLE", "i"), IsEmpty());
  EXPECT_THAT(Processes(events), ElementsAre(std::pair<std::string, int64_t>{"x", 1},
                                             std::pair<std::string, int64_t>{"y", 2}));

  const std::string second = PathOf("second.json");
  ASSERT_TRUE(timeline.Start(second, /*mark_cycles=*/true, Me()).ok());
  EXPECT_EQ(timeline.events_written(), 0u);
  timeline.Phase("y", exec::kPhaseReduce, MonotonicNanos(), MonotonicNanos(), 1);
  timeline.Cycle(MonotonicNanos());
  timeline.Cycle(MonotonicNanos());
  ASSERT_TRUE(timeline.Stop().ok());
  events = ParseTrace(second);
  EXPECT_EQ(Select(events, "CYCLE", "i").size(), 2u);
  EXPECT_THAT(Processes(events), ElementsAre(std::pair<std::string, int64_t>{"y", 1}));
  EXPECT_EQ(timeline.events_written(), events.size());
  // The first file is left as it was.
  EXPECT_EQ(Processes(ParseTrace(first)).size(), 2u);
}

TEST_F(TimelineTest, EscapesNamesAndKeepsUtf8) {
  observe::Timeline timeline;
  const std::string path = PathOf("names.json");
  const std::vector<std::string> names = {"a\"b\\c",      "tab\there", "new\nline",
                                          "\x01\x1f\x7f", "梯度/权重", "\xff\xfe bad utf-8"};
  ASSERT_TRUE(timeline.Start(path, false, Me()).ok());
  for (const std::string& name : names) timeline.Phase(name, exec::kPhaseReduce, 0, 0, 0);
  ASSERT_TRUE(timeline.Stop().ok());
  std::vector<std::string> read;
  for (const auto& [name, pid] : Processes(ParseTrace(path))) read.push_back(name);
  EXPECT_THAT(read, ElementsAre("a\"b\\c", "tab\there", "new\nline", "\x01\x1f\x7f", "梯度/权重",
                                "\xEF\xBF\xBD\xEF\xBF\xBD bad utf-8"));
}

TEST_F(TimelineTest, RefusesARelativePath) {
  observe::Timeline timeline;
  for (const std::string path : {"trace.json", "./trace.json", ""}) {
    const absl::Status status = timeline.Start(path, false, Me());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << path << ": " << status;
    EXPECT_FALSE(timeline.active());
  }
  const absl::Status status = timeline.Start("trace.json", false, Me());
  EXPECT_THAT(std::string(status.message()), HasSubstr("'trace.json' is relative"));
  EXPECT_FALSE(std::filesystem::exists("trace.json"));
}

TEST_F(TimelineTest, RefusesToStartTwice) {
  observe::Timeline timeline;
  const std::string path = PathOf("one.json");
  ASSERT_TRUE(timeline.Start(path, false, Me()).ok());
  const absl::Status status = timeline.Start(PathOf("two.json"), false, Me());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  EXPECT_FALSE(std::filesystem::exists(PathOf("two.json")));
  EXPECT_TRUE(timeline.active());
  EXPECT_EQ(timeline.path(), path);
  ASSERT_TRUE(timeline.Stop().ok());
}

TEST_F(TimelineTest, RefusesToStopWithoutStart) {
  observe::Timeline timeline;
  EXPECT_EQ(timeline.Stop().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(timeline.Start(PathOf("t.json"), false, Me()).ok());
  ASSERT_TRUE(timeline.Stop().ok());
  EXPECT_EQ(timeline.Stop().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(TimelineTest, RefusesWhereTheOwnerCannotWrite) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as uid " << kNobody;
  // Root may write here; nobody may not.
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  const std::string path = PathOf("trace.json");
  const ThreadIdentity identity = CurrentThreadIdentity();
  observe::Timeline timeline;
  const absl::Status status = timeline.Start(path, false, Nobody());
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  EXPECT_THAT(std::string(status.message()), HasSubstr("Permission denied"));
  EXPECT_FALSE(timeline.active());
  EXPECT_FALSE(std::filesystem::exists(path));
  // This thread is itself again.
  EXPECT_EQ(CurrentThreadIdentity(), identity);
  ASSERT_TRUE(timeline.Start(path, false, Me()).ok());
  ASSERT_TRUE(timeline.Stop().ok());
}

TEST_F(TimelineTest, CreatesTheFileAsItsOwner) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as uid " << kNobody;
  ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);
  const std::string path = PathOf("trace.json");
  const ThreadIdentity identity = CurrentThreadIdentity();
  observe::Timeline timeline;
  const absl::Status status = timeline.Start(path, false, Nobody());
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(CurrentThreadIdentity(), identity);
  timeline.Phase("t", exec::kPhaseReduce, 0, 0, 0);
  ASSERT_TRUE(timeline.Stop().ok());
  struct stat file {};
  ASSERT_EQ(stat(path.c_str(), &file), 0);
  EXPECT_EQ(file.st_uid, kNobody);
  EXPECT_EQ(file.st_gid, kNogroup);
  EXPECT_EQ(ParseTrace(path).size(), timeline.events_written());
}

TEST_F(TimelineTest, RefusesASymbolicLinkAndAFifo) {
  const std::string target = PathOf("target");
  std::ofstream(target) << "precious";
  const std::string link = PathOf("link.json");
  std::filesystem::create_symlink(target, link);
  observe::Timeline timeline;
  absl::Status status = timeline.Start(link, false, Me());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("symbolic link"));
  EXPECT_EQ(ReadFile(target), "precious");

  // A FIFO nobody reads would block the opening thread forever.
  const std::string fifo = PathOf("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  status = timeline.Start(fifo, false, Me());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(fifo));
  EXPECT_FALSE(timeline.active());
}

TEST_F(TimelineTest, ReportsAMissingDirectory) {
  observe::Timeline timeline;
  const std::string path = PathOf("no/such/dir/trace.json");
  const absl::Status status = timeline.Start(path, false, Me());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  EXPECT_THAT(std::string(status.message()), HasSubstr("No such file or directory"));
}

// A full disk, played by a file-size limit: Stop says the file is
// incomplete and why.
TEST_F(TimelineTest, StopReportsAWriteFailure) {
  observe::Timeline timeline;
  const std::string path = PathOf("trace.json");
  ASSERT_TRUE(timeline.Start(path, false, Me()).ok());
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const rlimit small = {.rlim_cur = 256, .rlim_max = saved.rlim_max};
  // Past the limit write() fails with EFBIG instead of raising SIGXFSZ.
  const sighandler_t previous = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  for (int i = 0; i < 100; ++i) timeline.Phase("t", exec::kPhaseReduce, 0, 0, i);
  const absl::Status status = timeline.Stop();
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, previous);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat(path, " is incomplete")));
  EXPECT_THAT(std::string(status.message()), HasSubstr("File too large"));
  EXPECT_FALSE(timeline.active());
  EXPECT_LT(timeline.events_written(), 100u);
}

// With no room at all every event is dropped, and the gap is noted.
TEST_F(TimelineTest, DropsEventsWhenTheWriterFallsBehind) {
  constexpr int kEvents = 20000;
  for (const uint64_t bound : {uint64_t{0}, uint64_t{1}, uint64_t{4096}}) {
    SCOPED_TRACE(bound);
    observe::Timeline timeline(bound);
    const std::string path = PathOf(absl::StrCat("bounded", bound, ".json"));
    ASSERT_TRUE(timeline.Start(path, false, Me()).ok());
    for (int i = 0; i < kEvents; ++i) timeline.Phase("t", exec::kPhaseReduce, 0, 0, i);
    ASSERT_TRUE(timeline.Stop().ok());
    const std::vector<Event> events = ParseTrace(path);
    EXPECT_EQ(timeline.events_written(), events.size());
    double dropped = 0;
    for (const Event& note : Select(events, "EVENTS_DROPPED", "i")) {
      EXPECT_EQ(note.scope, "g");
      dropped += note.NumberArg("count");
    }
    const size_t kept = Select(events, "REDUCE", "X").size();
    EXPECT_EQ(kept + static_cast<size_t>(dropped), static_cast<size_t>(kEvents));
    if (bound == 0) {
      EXPECT_EQ(kept, 0u);
    }
  }
}

TEST_F(TimelineTest, DestructorCompletesTheFile) {
  const std::string path = PathOf("trace.json");
  {
    observe::Timeline timeline;
    ASSERT_TRUE(timeline.Start(path, true, Me()).ok());
    timeline.Phase("t", exec::kPhaseQueue, 0, 0, 0);
    timeline.Cycle(MonotonicNanos());
  }
  const std::vector<Event> events = ParseTrace(path);
  EXPECT_EQ(Select(events, "QUEUE", "X").size(), 1u);
  EXPECT_EQ(Select(events, "CYCLE", "i").size(), 1u);
}

// The engine records while another thread starts and stops recordings:
// every file is complete, and the accessors answer from any thread.
TEST_F(TimelineTest, StartsAndStopsWhileTheEngineRecords) {
  observe::Timeline timeline;
  std::atomic<bool> done{false};
  std::thread engine([&] {
    for (uint64_t i = 0; !done.load(); ++i) {
      const uint64_t now = MonotonicNanos();
      timeline.Phase(absl::StrCat("tensor", i % 7), exec::kPhaseReduce, now, now + 10, i);
      timeline.CopyOut(absl::StrCat("tensor", i % 7), static_cast<int32_t>(i % 3), now, now + 5);
      timeline.Cycle(now);
    }
  });
  for (int round = 0; round < 20; ++round) {
    const std::string path = PathOf(absl::StrCat("round", round, ".json"));
    ASSERT_TRUE(timeline.Start(path, round % 2 == 0, Me()).ok());
    EXPECT_TRUE(timeline.active());
    ASSERT_TRUE(timeline.Stop().ok());
    const std::vector<Event> events = ParseTrace(path);
    EXPECT_EQ(timeline.events_written(), events.size());
    if (round % 2 != 0) {
      EXPECT_THAT(Select(events, "CYCLE", "i"), IsEmpty());
    }
    for (const auto& [name, pid] : Processes(events)) EXPECT_LE(pid, 7);
  }
  done.store(true);
  engine.join();
}

TEST(TraceEventTest, FormatsMicrosecondsExactly) {
  for (const auto& [nanos, text] :
       std::vector<std::pair<uint64_t, std::string>>{{0, "0.000"},
                                                     {7, "0.007"},
                                                     {1'001, "1.001"},
                                                     {12'345'678, "12345.678"},
                                                     {UINT64_MAX, "18446744073709551.615"}}) {
    std::string out;
    observe::AppendMicros(out, nanos);
    EXPECT_EQ(out, text);
  }
}

TEST(TraceEventTest, EscapesStrings) {
  std::string out;
  observe::AppendJsonString(out, "q\"b\\s\x01\x7f\n/é\xc3");
  EXPECT_EQ(out, "\"q\\\"b\\\\s\\u0001\\u007f\\n/é\xEF\xBF\xBD\"");
  out.clear();
  // Overlong forms and surrogates are not UTF-8.
  observe::AppendJsonString(out, "\xc0\xaf\xed\xa0\x80");
  EXPECT_EQ(out, "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
}

TEST(TraceEventTest, BuildsOneEvent) {
  std::string out;
  observe::TraceEvent(out, "REDUCE", "X", 3, 0)
      .Time(1'500)
      .Duration(2'000)
      .Arg("bytes", 64)
      .Close();
  EXPECT_EQ(out, R"({"name":"REDUCE","ph":"X","pid":3,"tid":0,"ts":1.500,"dur":2.000,)"
                 R"("args":{"bytes":64}})");
  out.clear();
  observe::TraceEvent(out, "CYCLE", "i", 0, 0).Time(1).Scope("g").Close();
  EXPECT_EQ(out, R"({"name":"CYCLE","ph":"i","pid":0,"tid":0,"ts":0.001,"s":"g"})");
}

// Two jobs on one daemon: the daemon's timeline records both, a job's own
// timeline that job alone, and a job whose own timeline is off still
// records while the daemon's does.
TEST_F(TimelineTest, AJobsOwnTimelineRecordsThatJobAlone) {
  Timeline daemon;
  Timeline own_a;
  Timeline own_b;
  JobTimelines job_a(daemon, own_a);
  JobTimelines job_b(daemon, own_b);
  EXPECT_FALSE(job_a.active());
  ASSERT_TRUE(own_a.Start(PathOf("a.json"), /*mark_cycles=*/false, Me()).ok());
  EXPECT_TRUE(job_a.active());
  EXPECT_FALSE(job_b.active());
  ASSERT_TRUE(daemon.Start(PathOf("daemon.json"), /*mark_cycles=*/false, Me()).ok());
  EXPECT_TRUE(job_b.active());

  const uint64_t now = MonotonicNanos();
  const RankArrival arrivals[] = {{0, now}, {1, now + 1000}};
  for (auto [job, tensor] : {std::pair{&job_a, "a.grad"}, std::pair{&job_b, "b.grad"}}) {
    job->Negotiation(tensor, v1::COLLECTIVE_ALLREDUCE, now, now + 1000, arrivals);
    job->Phase(tensor, exec::kPhaseReduce, now + 1000, now + 2000, 64);
    job->CopyOut(tensor, 1, now + 2000, now + 3000);
  }
  ASSERT_TRUE(own_a.Stop().ok());
  ASSERT_TRUE(daemon.Stop().ok());

  using Rows = std::vector<std::pair<std::string, int64_t>>;
  const std::vector<Event> a = ParseTrace(PathOf("a.json"));
  EXPECT_EQ(Processes(a), (Rows{{"a.grad", 1}}));
  EXPECT_EQ(Select(a, "NEGOTIATE_ALLREDUCE", "X").size(), 1u);
  EXPECT_EQ(Select(a, std::string(exec::kPhaseReduce), "X").size(), 1u);
  EXPECT_EQ(Select(a, std::string(exec::kPhaseCopyOut), "X").size(), 1u);
  const std::vector<Event> both = ParseTrace(PathOf("daemon.json"));
  EXPECT_EQ(Processes(both), (Rows{{"a.grad", 1}, {"b.grad", 2}}));
  EXPECT_EQ(Select(both, std::string(exec::kPhaseReduce), "X").size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(PathOf("b.json")));
}

}  // namespace
}  // namespace collective::daemon::observe
