// collectiverun with a real collectived and real ranks: jobs of the test
// worker on a private daemon and on one the test started, output prefixed
// per rank, a failing rank stopping the others, forwarded signals, the
// private daemon dying, and what is left behind (nothing) in each case; an
// elastic job's workers re-forming it without a failed one.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "shm/segment_names.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Generous: every job here finishes in a few seconds, and each test bounds
// the part that matters (how fast ranks are stopped) more tightly.
constexpr absl::Duration kTimeout = absl::Seconds(60);

std::string CollectiverunBinary() { return COLLECTIVERUN_BINARY; }

// The small-memory daemon flags, as collectiverun passes them on.
std::vector<std::string> SmallDaemonArgs() {
  const std::vector<std::string> flags = SmallMemoryFlags();
  std::vector<std::string> args;
  for (size_t i = 0; i + 1 < flags.size(); i += 2) {
    args.push_back(absl::StrCat("--daemon-arg=", flags[i], "=", flags[i + 1]));
  }
  return args;
}

// No daemon configured in the environment the test itself may have.
const std::map<std::string, std::string> kPrivateDaemon = {{"COLLECTIVE_SOCKET", ""},
                                                           {"COLLECTIVE_JOB_ID", ""}};
// The same for an elastic job, whose workers give up waiting after 30 s.
const std::map<std::string, std::string> kElasticPrivateDaemon = {
    {"COLLECTIVE_SOCKET", ""}, {"COLLECTIVE_JOB_ID", ""}, {"COLLECTIVE_ELASTIC_TIMEOUT_S", "30"}};

absl::StatusOr<Subprocess> StartLauncher(
    const std::vector<std::string>& args,
    const std::map<std::string, std::string>& environment = kPrivateDaemon) {
  std::vector<std::string> argv = {CollectiverunBinary()};
  const auto socket = environment.find("COLLECTIVE_SOCKET");
  const bool configured = (socket != environment.end() && !socket->second.empty()) ||
                          std::find(args.begin(), args.end(), "--socket") != args.end();
  if (!configured) {
    const std::vector<std::string> daemon_args = SmallDaemonArgs();
    argv.insert(argv.end(), daemon_args.begin(), daemon_args.end());
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return Subprocess::Start(argv, environment);
}

struct LaunchResult {
  int exit_code = -1;  // -1: did not exit by itself (see `how`)
  std::string how;
  std::string out;
  std::string err;
  absl::Duration wall;
};

LaunchResult Finish(Subprocess& launcher, absl::Time started, absl::Duration timeout = kTimeout) {
  LaunchResult run;
  const auto status = launcher.Wait(timeout);
  run.wall = absl::Now() - started;
  if (status.has_value() && WIFEXITED(*status)) {
    run.exit_code = WEXITSTATUS(*status);
  }
  run.how = status.has_value() ? launcher.Describe(*status) : "still running at the deadline";
  run.out = launcher.Stdout();
  run.err = launcher.Stderr();
  return run;
}

LaunchResult RunLauncher(const std::vector<std::string>& args,
                         const std::map<std::string, std::string>& environment = kPrivateDaemon) {
  const absl::Time started = absl::Now();
  auto launcher = StartLauncher(args, environment);
  if (!launcher.ok()) return {.how = launcher.status().ToString()};
  return Finish(*launcher, started);
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The lines, in any order (the ranks' lines interleave as they please).
std::multiset<std::string> LineSet(const std::string& text) {
  const std::vector<std::string> lines = Lines(text);
  return {lines.begin(), lines.end()};
}

// A shell command line run by every rank.
std::vector<std::string> Shell(const std::string& script) { return {"/bin/sh", "-c", script}; }

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Polls the launcher's stdout until `done` holds or the deadline passes
// (the ranks announce that they are up; there is nothing to wait on but the
// file they write to).
bool AwaitStdout(const Subprocess& launcher, const std::function<bool(const std::string&)>& done,
                 absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done(launcher.Stdout())) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// A launch of two ranks running `script`, which prints "up" first: started,
// and waited for until both ranks have.
struct RunningLaunch {
  Subprocess launcher;
  absl::Time started;
};
absl::StatusOr<RunningLaunch> StartTwoRanksUntilUp(std::vector<std::string> options,
                                                   const std::string& script) {
  const absl::Time started = absl::Now();
  options.insert(options.end(), {"-np", "2"});
  auto launcher = StartLauncher(Concat(options, Shell(script)));
  if (!launcher.ok()) return launcher.status();
  if (!AwaitStdout(*launcher, [](const std::string& out) {
        return absl::StrContains(out, "[0] up") && absl::StrContains(out, "[1] up");
      })) {
    return absl::DeadlineExceededError(absl::StrCat("the ranks did not come up; stdout:\n",
                                                    launcher->Stdout(), "stderr:\n",
                                                    launcher->Stderr()));
  }
  return RunningLaunch{std::move(*launcher), started};
}

bool ProcessGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// "collectived (pid N) serves PATH", from --verbose.
struct PrivateDaemonSeen {
  pid_t pid = -1;
  std::string socket;
};
PrivateDaemonSeen FindPrivateDaemon(const std::string& err) {
  std::smatch match;
  static const std::regex kServes(R"(collectived \(pid (\d+)\) serves (\S+))");
  if (!std::regex_search(err, match, kServes)) return {};
  return {static_cast<pid_t>(std::stol(match[1])), match[2]};
}

// What a private daemon could have left behind: its process, its directory,
// shared memory named for its socket.
void ExpectNothingLeft(const PrivateDaemonSeen& daemon) {
  ASSERT_GT(daemon.pid, 0);
  EXPECT_TRUE(ProcessGone(daemon.pid)) << "collectived pid " << daemon.pid << " still exists";
  const std::filesystem::path directory = std::filesystem::path(daemon.socket).parent_path();
  EXPECT_FALSE(std::filesystem::exists(directory)) << directory;
  const std::string prefix = shm::SegmentNames(::geteuid(), daemon.socket, 0).prefix();
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    EXPECT_FALSE(absl::StartsWith(entry.path().filename().string(), prefix)) << entry.path();
  }
}

class LauncherJobTest : public ::testing::TestWithParam<int> {};

TEST_P(LauncherJobTest, RunsTheTestWorkerOnAPrivateDaemon) {
  const int ranks = GetParam();
  const LaunchResult run = RunLauncher({"--verbose", "-np", std::to_string(ranks),
                                        TestWorkerBinary(), "matrix", "--big-bytes", "4096"});
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out;
  std::set<int> reported;
  for (const std::string& line : Lines(run.out)) {
    std::smatch match;
    static const std::regex kOk(R"(\[(\d+)\] ok \d+ cases on rank (\d+) of (\d+))");
    ASSERT_TRUE(std::regex_match(line, match, kOk)) << line;
    EXPECT_EQ(match[1], match[2]) << line;
    EXPECT_EQ(match[3], std::to_string(ranks)) << line;
    reported.insert(std::stoi(match[1]));
  }
  EXPECT_EQ(reported.size(), static_cast<size_t>(ranks)) << run.out;
  ExpectNothingLeft(FindPrivateDaemon(run.err));
}

INSTANTIATE_TEST_SUITE_P(Ranks, LauncherJobTest, ::testing::Values(2, 4),
                         [](const auto& test_info) {
                           return std::to_string(test_info.param) + "Ranks";
                         });

TEST(LauncherTest, PrefixesEachRanksLinesWholeOnTheirOwnStream) {
  // A 100000-byte line reaches the pipe in pieces (tr writes 4 KiB at a
  // time); the last line has no newline.
  const LaunchResult run = RunLauncher(
      Concat({"-np", "2"},
             Shell("echo \"out $COLLECTIVE_LOCAL_RANK\"; echo \"err $COLLECTIVE_LOCAL_RANK\" >&2; "
                   "head -c 100000 /dev/zero | tr '\\0' x; echo; printf 'partial'")));
  ASSERT_EQ(run.exit_code, 0) << run.how;
  const std::string long_line(100000, 'x');
  const std::multiset<std::string> expected_out = {"[0] out 0",        "[1] out 1",
                                                   "[0] " + long_line, "[1] " + long_line,
                                                   "[0] partial",      "[1] partial"};
  EXPECT_TRUE(LineSet(run.out) == expected_out) << run.out.substr(0, 2000);
  EXPECT_THAT(run.err, HasSubstr("[0] err 0\n"));
  EXPECT_THAT(run.err, HasSubstr("[1] err 1\n"));
  EXPECT_EQ(run.out.find("err"), std::string::npos);
}

TEST(LauncherTest, NoPrefixPassesOutputThrough) {
  const LaunchResult run = RunLauncher(
      Concat({"-np", "2", "--no-prefix"}, Shell("echo \"rank $COLLECTIVE_LOCAL_RANK\"")));
  ASSERT_EQ(run.exit_code, 0) << run.how;
  EXPECT_TRUE(LineSet(run.out) == std::multiset<std::string>({"rank 0", "rank 1"})) << run.out;
}

// horovodrun's --output-filename: each rank's output, as written, in
// DIR/rank.<N>/stdout and stderr (N padded for the job's largest rank),
// while the terminal still gets it prefixed.
TEST(LauncherTest, OutputFilenameKeepsEachRanksOutputInItsFiles) {
  const std::string directory = absl::StrCat(::testing::TempDir(), "/launcher-output-", ::getpid());
  std::filesystem::remove_all(directory);
  const LaunchResult run = RunLauncher(
      Concat({"-np", "11", "--output-filename", directory},
             Shell("echo \"out $COLLECTIVE_LOCAL_RANK\"; echo \"err $COLLECTIVE_LOCAL_RANK\" >&2; "
                   "printf unfinished")));
  ASSERT_EQ(run.exit_code, 0) << run.how << "\n" << run.err;
  EXPECT_THAT(run.out, HasSubstr("[7] out 7\n"));
  EXPECT_THAT(run.err, HasSubstr("[10] err 10\n"));
  const auto read = [](const std::string& path) {
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
  };
  for (int rank = 0; rank < 11; ++rank) {
    const std::string files = absl::StrCat(directory, "/rank.", rank < 10 ? "0" : "", rank);
    EXPECT_EQ(read(files + "/stdout"), absl::StrCat("out ", rank, "\nunfinished")) << files;
    EXPECT_EQ(read(files + "/stderr"), absl::StrCat("err ", rank, "\n")) << files;
  }
  std::filesystem::remove_all(directory);

  // An output directory that cannot be made stops the launch, named.
  const LaunchResult refused =
      RunLauncher({"-np", "1", "--output-filename", "/proc/no-such-place", "true"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("cannot make /proc/no-such-place/rank.0"));
}

TEST(LauncherTest, EveryRankKnowsWhereItStands) {
  const LaunchResult run = RunLauncher(Concat(
      {"-np", "3"},
      Shell("echo $COLLECTIVE_LOCAL_RANK/$COLLECTIVE_LOCAL_SIZE $HOROVOD_RANK/$HOROVOD_SIZE "
            "$HOROVOD_LOCAL_RANK/$HOROVOD_LOCAL_SIZE $RANK/$WORLD_SIZE "
            "$LOCAL_RANK/$LOCAL_WORLD_SIZE $COLLECTIVE_JOB_ID; test -S \"$COLLECTIVE_SOCKET\"")));
  ASSERT_EQ(run.exit_code, 0) << run.how << "\n" << run.out;
  std::set<std::string> job_ids;
  for (const std::string& line : Lines(run.out)) {
    const std::vector<std::string> words = absl::StrSplit(line, ' ');
    ASSERT_EQ(words.size(), 7u) << line;
    const std::string rank = words[0].substr(1, words[0].size() - 2);  // "[2]"
    for (size_t i = 1; i <= 5; ++i) EXPECT_EQ(words[i], rank + "/3") << line;
    job_ids.insert(words[6]);
  }
  ASSERT_EQ(job_ids.size(), 1u) << run.out;
  EXPECT_THAT(*job_ids.begin(), ::testing::StartsWith("collectiverun-"));

  // Another launch is another job; COLLECTIVE_JOB_ID chooses it.
  const LaunchResult again = RunLauncher(Concat({"-np", "1"}, Shell("echo $COLLECTIVE_JOB_ID")));
  EXPECT_NE(again.out, "[0] " + *job_ids.begin() + "\n");
  const LaunchResult chosen =
      RunLauncher(Concat({"-np", "1"}, Shell("echo $COLLECTIVE_JOB_ID")),
                  {{"COLLECTIVE_SOCKET", ""}, {"COLLECTIVE_JOB_ID", "mine"}});
  EXPECT_EQ(chosen.out, "[0] mine\n") << chosen.how;
}

TEST(LauncherTest, AFailingRankStopsTheOthersAndSetsTheExitCode) {
  // Ranks 0 and 2 would sleep for ever; SIGTERM must end them well before
  // the grace period would have them killed.
  const LaunchResult run = RunLauncher(
      Concat({"-np", "3", "--grace-seconds", "30"},
             Shell("if [ \"$COLLECTIVE_LOCAL_RANK\" = 1 ]; then exit 3; fi; exec sleep 1000")));
  EXPECT_EQ(run.exit_code, 3) << run.how;
  EXPECT_LT(run.wall, absl::Seconds(15));
  EXPECT_TRUE(std::regex_search(
      run.err, std::regex(R"(collectiverun: rank 1 \(pid \d+\) exited with code 3; stopping )"
                          R"(the other 2 ranks)")))
      << run.err;
}

TEST(LauncherTest, ARankKilledByASignalIsNamed) {
  const LaunchResult run = RunLauncher(Concat(
      {"-np", "2"},
      Shell("if [ \"$COLLECTIVE_LOCAL_RANK\" = 0 ]; then kill -KILL $$; fi; exec sleep 1000")));
  EXPECT_EQ(run.exit_code, 128 + SIGKILL) << run.how;
  EXPECT_LT(run.wall, absl::Seconds(15));
  EXPECT_THAT(run.err, HasSubstr("was killed by signal 9 (SIGKILL); stopping the other 1 rank"));
}

TEST(LauncherTest, ARankThatIgnoresSigtermIsKilledAfterTheGracePeriod) {
  // Rank 0 ignores SIGTERM (`trap '' TERM`, inherited by the sleep it
  // becomes), then tells rank 1 through a FIFO, which only then fails.
  char directory[] = "/tmp/cld-launcher-XXXXXX";
  ASSERT_NE(::mkdtemp(directory), nullptr);
  const std::string fifo = std::string(directory) + "/ready";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const LaunchResult run = RunLauncher(
      Concat({"-np", "2", "--grace-seconds", "1"},
             Shell("if [ \"$COLLECTIVE_LOCAL_RANK\" = 1 ]; then read x < " + fifo +
                   "; exit 4; fi; " + "trap '' TERM; echo ready > " + fifo + "; exec sleep 1000")));
  std::filesystem::remove_all(directory);
  EXPECT_EQ(run.exit_code, 4) << run.how;
  EXPECT_GE(run.wall, absl::Seconds(1));
  EXPECT_LT(run.wall, absl::Seconds(15));
  EXPECT_THAT(run.err, HasSubstr("1 rank still running after 1s; sending SIGKILL"));
}

TEST(LauncherTest, SigtermStopsTheRanksAndTheDaemonAndLeavesNothing) {
  auto job = StartTwoRanksUntilUp({"--verbose"}, "echo \"up $$\"; exec sleep 1000");
  ASSERT_TRUE(job.ok()) << job.status();
  job->launcher.Signal(SIGTERM);
  const LaunchResult run = Finish(job->launcher, job->started, absl::Seconds(30));
  EXPECT_EQ(run.exit_code, 128 + SIGTERM) << run.how;
  EXPECT_THAT(run.err, HasSubstr("received SIGTERM; forwarding it to 2 ranks"));
  for (const std::string& line : Lines(run.out)) {
    const pid_t rank_pid = static_cast<pid_t>(std::stol(line.substr(line.rfind(' ') + 1)));
    EXPECT_TRUE(ProcessGone(rank_pid)) << line;
  }
  ExpectNothingLeft(FindPrivateDaemon(run.err));
}

TEST(LauncherTest, ForwardsTheSignalItself) {
  // Each rank reports the SIGHUP it gets and exits 0; collectiverun still
  // reports the interruption.
  auto job =
      StartTwoRanksUntilUp({}, "trap 'echo got HUP; exit 0' HUP; echo up; sleep 1000 & wait");
  ASSERT_TRUE(job.ok()) << job.status();
  job->launcher.Signal(SIGHUP);
  const LaunchResult run = Finish(job->launcher, job->started, absl::Seconds(30));
  EXPECT_EQ(run.exit_code, 128 + SIGHUP) << run.how;
  EXPECT_THAT(run.out, HasSubstr("[0] got HUP\n"));
  EXPECT_THAT(run.out, HasSubstr("[1] got HUP\n"));
}

TEST(LauncherTest, ThePrivateDaemonDyingStopsTheJob) {
  auto job = StartTwoRanksUntilUp({"--verbose"}, "echo up; exec sleep 1000");
  ASSERT_TRUE(job.ok()) << job.status();
  const PrivateDaemonSeen daemon = FindPrivateDaemon(job->launcher.Stderr());
  ASSERT_GT(daemon.pid, 0) << job->launcher.Stderr();
  ASSERT_EQ(::kill(daemon.pid, SIGKILL), 0);
  const LaunchResult run = Finish(job->launcher, job->started, absl::Seconds(30));
  EXPECT_EQ(run.exit_code, 1) << run.how;
  EXPECT_THAT(run.err, HasSubstr(absl::StrCat("collectived (pid ", daemon.pid,
                                              ") was killed by signal 9 (SIGKILL) while the job "
                                              "ran; stopping the ranks")));
  ExpectNothingLeft(daemon);
}

TEST(LauncherTest, ACommandThatDoesNotExistFailsClearly) {
  const LaunchResult run =
      RunLauncher({"--verbose", "-np", "2", "collectiverun-no-such-command", "x"});
  EXPECT_EQ(run.exit_code, 127) << run.how;
  EXPECT_THAT(run.err, HasSubstr("collectiverun: cannot start 'collectiverun-no-such-command': "
                                 "No such file or directory\n"));
  ExpectNothingLeft(FindPrivateDaemon(run.err));
}

TEST(LauncherTest, ADaemonThatCannotStartIsReportedWithItsOutput) {
  const LaunchResult bad_flag = RunLauncher({"--daemon-arg=--no-such-flag", "-np", "1", "true"});
  EXPECT_EQ(bad_flag.exit_code, 1) << bad_flag.how;
  EXPECT_THAT(bad_flag.err, HasSubstr("[collectived] "));
  EXPECT_THAT(bad_flag.err, HasSubstr("--no-such-flag"));
  EXPECT_THAT(bad_flag.err, ::testing::ContainsRegex(
                                "collectiverun: collectived \\(pid [0-9]+\\) exited with code"));
  EXPECT_THAT(bad_flag.err, HasSubstr("before it was ready"));

  const LaunchResult missing =
      RunLauncher({"--daemon", "/nonexistent/collectived", "-np", "1", "true"});
  EXPECT_EQ(missing.exit_code, 127) << missing.how;
  EXPECT_THAT(missing.err, HasSubstr("cannot start '/nonexistent/collectived': No such file"));
}

// A job launched with Horovod's tuning variables gets them from its private
// daemon (config/horovod_environment.h), as the rank's collectivectl sees.
TEST(LauncherTest, ThePrivateDaemonTakesHorovodsTuningVariables) {
  const LaunchResult run =
      RunLauncher(Concat({"-np", "1", "--no-prefix"},
                         Shell(absl::StrCat(CollectivectlBinary(), " status --json"))),
                  {{"COLLECTIVE_SOCKET", ""},
                   {"COLLECTIVE_JOB_ID", ""},
                   {"HOROVOD_CACHE_CAPACITY", "0"},
                   {"HOROVOD_CYCLE_TIME", "2.5"}});
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  // (The tests' --fusion-threshold-bytes flag would hide HOROVOD_FUSION_THRESHOLD: flags win.)
  EXPECT_THAT(run.out, HasSubstr("\"response_cache\":false"));
  EXPECT_THAT(run.out, HasSubstr("\"cycle_time_ms\":3,"));  // rounded up to a whole ms
}

// horovodrun's flags set the same variables, over the environment's.
TEST(LauncherTest, HorovodrunsTuningFlagsReachThePrivateDaemon) {
  const std::string timeline =
      absl::StrCat(::testing::TempDir(), "/launcher-flags-", ::getpid(), ".json");
  const LaunchResult run = RunLauncher(
      Concat({"-np", "1", "--no-prefix", "--cache-capacity", "0", "--cycle-time-ms", "3.5",
              "--timeline-filename", timeline},
             Shell(absl::StrCat(CollectivectlBinary(), " status --json"))),
      {{"COLLECTIVE_SOCKET", ""}, {"COLLECTIVE_JOB_ID", ""}, {"HOROVOD_CYCLE_TIME", "9"}});
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_THAT(run.out, HasSubstr("\"response_cache\":false"));
  EXPECT_THAT(run.out, HasSubstr("\"cycle_time_ms\":4,"));  // the flag's, rounded up
  EXPECT_THAT(run.out, HasSubstr("\"timeline\":{\"active\":true"));
  std::remove(timeline.c_str());
}

TEST(LauncherTest, UsesAConfiguredDaemonAndLeavesItRunning) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const LaunchResult run =
      RunLauncher({"--verbose", "-np", "2", TestWorkerBinary(), "matrix", "--big-bytes", "4096"},
                  {{"COLLECTIVE_SOCKET", (*daemon)->socket()}, {"COLLECTIVE_JOB_ID", ""}});
  ASSERT_EQ(run.exit_code, 0) << run.how << "\n" << run.out;
  EXPECT_THAT(run.err, HasSubstr("using the collectived on " + (*daemon)->socket()));
  EXPECT_EQ(FindPrivateDaemon(run.err).pid, -1) << run.err;
  EXPECT_EQ(Lines(run.out).size(), 2u) << run.out;

  // The job ran there, and the daemon still serves.
  EXPECT_FALSE((*daemon)->process().Wait(absl::ZeroDuration()).has_value());
  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().jobs(), 1u);
  EXPECT_EQ(status->totals().errors(), 0u);

  // --socket says the same; a second job runs on it too.
  const LaunchResult second = RunLauncher({"--socket", (*daemon)->socket(), "-np", "2",
                                           TestWorkerBinary(), "matrix", "--big-bytes", "16"},
                                          {{"COLLECTIVE_SOCKET", ""}});
  EXPECT_EQ(second.exit_code, 0) << second.how;
  status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().jobs(), 2u);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

// Horovod's suite shuts down and initialises again after every test, and
// elastic training does the same: ten runs of init, allreduce, barrier and
// shutdown on 2 ranks all succeed, under the private daemon (true) and under
// one started on its own (false), and the private daemon then stops at
// SIGTERM.
class LauncherReinitTest : public ::testing::TestWithParam<bool> {};

TEST_P(LauncherReinitTest, EveryRankInitialisesAgainTenTimes) {
  const bool private_daemon = GetParam();
  std::unique_ptr<DaemonProcess> configured;
  std::vector<std::string> args = {"--verbose", "-np", "2"};
  if (!private_daemon) {
    auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    configured = std::move(*daemon);
    args.insert(args.end(), {"--socket", configured->socket()});
  }
  const LaunchResult run =
      RunLauncher(Concat(args, {TestWorkerBinary(), "reinit", "--times", "10"}));
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>({"[0] ok 10 inits", "[1] ok 10 inits"}))
      << run.out;
  EXPECT_THAT(run.err, Not(HasSubstr("did not stop")));
  if (private_daemon) {
    ExpectNothingLeft(FindPrivateDaemon(run.err));
    return;
  }
  auto status = configured->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().jobs(), 10u);
  EXPECT_EQ(status->job().state(), v1::JOB_STATE_IDLE);
  EXPECT_TRUE(ExitedCleanly(configured->Stop())) << configured->process().Stderr();
}

INSTANTIATE_TEST_SUITE_P(Daemons, LauncherReinitTest, ::testing::Bool(), [](const auto& test_info) {
  return test_info.param ? "PrivateDaemon" : "ConfiguredDaemon";
});

TEST(LauncherTest, AConfiguredDaemonThatIsNotThereFailsClearly) {
  const LaunchResult run = RunLauncher(
      {"-np", "2", "true"}, {{"COLLECTIVE_SOCKET", "/tmp/collectiverun-test-nobody.sock"}});
  EXPECT_EQ(run.exit_code, 1) << run.how;
  EXPECT_THAT(run.err, HasSubstr("collectiverun: no collectived answers on "
                                 "/tmp/collectiverun-test-nobody.sock: No such file or directory"));
}

// An elastic worker that waits, as collective.torch.elastic does (inotify,
// with a deadline), for the generation after a failure and prints it with
// its own number. Loads the rendezvous module by path: it needs nothing of
// the package.
// `after_failure`: the generation that follows a failure; otherwise any later one.
std::string AwaitWorld(bool after_failure = true) {
  return absl::StrCat(
      "/usr/bin/python3 -c \"import importlib.util as u; s = u.spec_from_file_location('r', '",
      COLLECTIVE_SOURCE_DIR,
      "/client/python/collective/common/elastic_rendezvous.py'); r = u.module_from_spec(s); "
      "s.loader.exec_module(r); w = r.wait_for_next_world(",
      after_failure ? "True" : "False",
      "); "
      "print('worker', r.worker(), 'sees generation', w.generation, w.job_id.rsplit('.')[-1], "
      "w.workers)\"");
}

TEST(LauncherTest, AnElasticJobGoesOnWithoutAFailedWorker) {
  const LaunchResult run = RunLauncher(
      Concat({"--elastic", "--min-np", "2", "-np", "3"},
             Shell(absl::StrCat("if [ \"$COLLECTIVE_ELASTIC_WORKER\" = 1 ]; then exit 3; "
                                "fi; exec ",
                                AwaitWorld()))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_TRUE(std::regex_search(
      run.err, std::regex(R"(collectiverun: worker 1 \(pid \d+\) exited with code 3; re-forming )"
                          R"(the job with 2 workers as generation 1)")))
      << run.err;
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>({"[0] worker 0 sees generation 1 1 [0, 2]",
                                          "[2] worker 2 sees generation 1 1 [0, 2]"}))
      << run.out;
}

TEST(LauncherTest, AnElasticJobReformsWithTheSameWorkersOnceEveryWorkerAsks) {
  // Every worker has joined generation 0 (its marker, as init() writes it),
  // then waits as after a collective that failed on every rank: it asks to
  // re-form (reset-0-<worker>). No worker dies, so only the last request
  // makes the launcher publish generation 1, with the same workers.
  const LaunchResult run = RunLauncher(
      Concat(
          {"--elastic", "-np", "3"},
          Shell(absl::StrCat(": > \"$COLLECTIVE_ELASTIC_DIR/joining-0-$COLLECTIVE_ELASTIC_WORKER\""
                             "; exec ",
                             AwaitWorld()))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr("collectiverun: a collective failed on every worker; re-forming "
                                 "the job with the same 3 workers as generation 1"));
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>({"[0] worker 0 sees generation 1 1 [0, 1, 2]",
                                          "[1] worker 1 sees generation 1 1 [0, 1, 2]",
                                          "[2] worker 2 sees generation 1 1 [0, 1, 2]"}))
      << run.out;
}

TEST(LauncherTest, AnElasticJobStopsBelowMinNp) {
  const LaunchResult run = RunLauncher(
      Concat({"--elastic", "-np", "3", "--grace-seconds", "30"},
             Shell("if [ \"$COLLECTIVE_ELASTIC_WORKER\" = 1 ]; then exit 3; fi; exec sleep 1000")));
  EXPECT_EQ(run.exit_code, 3) << run.how;
  EXPECT_LT(run.wall, absl::Seconds(15));
  EXPECT_THAT(run.err, HasSubstr("collectiverun: cannot re-form the job without worker 1: only 2 "
                                 "workers would remain, fewer than --min-np 3"));
  EXPECT_THAT(run.err, HasSubstr("stopping the other 2 ranks"));
}

TEST(LauncherTest, AnElasticJobStopsPastItsResetLimit) {
  // Workers 0 and 1 fail: whichever the launcher sees second would need a
  // second re-formation, one more than --reset-limit 1 allows.
  const LaunchResult run = RunLauncher(Concat(
      {"--elastic", "--min-np", "1", "-np", "3", "--reset-limit", "1", "--grace-seconds", "30"},
      Shell("case $COLLECTIVE_ELASTIC_WORKER in 0|1) exit 3;; esac; exec sleep 1000")));
  EXPECT_EQ(run.exit_code, 3) << run.how << "\n" << run.err;
  EXPECT_LT(run.wall, absl::Seconds(15));
  EXPECT_THAT(run.err, HasSubstr("re-forming the job with 2 workers as generation 1"));
  EXPECT_TRUE(std::regex_search(
      run.err, std::regex(R"(collectiverun: cannot re-form the job without worker [01]: the job )"
                          R"(has re-formed 1 times, as many as --reset-limit 1 allows)")))
      << run.err;
  EXPECT_THAT(run.err, HasSubstr("stopping the other 1 rank"));
}

TEST(LauncherTest, AnElasticJobReplacesAFailedWorker) {
  // Worker 1 fails at once; worker 2 takes its place as rank 1 of
  // generation 1 and says where it stands and what it waits for.
  const LaunchResult run = RunLauncher(
      Concat({"--elastic", "-np", "2", "--restart-failed", "1"},
             Shell(absl::StrCat("case $COLLECTIVE_ELASTIC_WORKER in 1) exit 3;; 2) echo rank "
                                "$COLLECTIVE_LOCAL_RANK of $COLLECTIVE_LOCAL_SIZE generation "
                                "$COLLECTIVE_ELASTIC_GENERATION job ${COLLECTIVE_JOB_ID##*.} after "
                                "\"$COLLECTIVE_ELASTIC_AWAIT\"; exit 0;; esac; exec ",
                                AwaitWorld()))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr("re-forming the job with 2 workers (worker 2 replaces it) as "
                                 "generation 1"));
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>({"[0] worker 0 sees generation 1 1 [0, 2]",
                                          "[2] rank 1 of 2 generation 1 job 1 after 0"}))
      << run.out;
}

// A host discovery script that prints what the test writes into a file.
class DiscoveryScript {
 public:
  explicit DiscoveryScript(const std::string& hosts) {
    const std::string base =
        absl::StrCat(::testing::TempDir(), "/discovery-", ::getpid(), "-",
                     ::testing::UnitTest::GetInstance()->random_seed(), "-", ++count_);
    hosts_ = base + ".hosts";
    script_ = base + ".sh";
    List(hosts);
    std::ofstream(script_) << "#!/bin/sh\nexec cat '" << hosts_ << "'\n";
    ::chmod(script_.c_str(), 0700);
  }
  ~DiscoveryScript() {
    std::filesystem::remove(hosts_);
    std::filesystem::remove(script_);
  }
  void List(const std::string& hosts) const { std::ofstream(hosts_) << hosts << "\n"; }
  const std::string& hosts() const { return hosts_; }
  const std::string& script() const { return script_; }

 private:
  static inline int count_ = 0;
  std::string hosts_;
  std::string script_;
};

TEST(LauncherTest, AHostDiscoveryScriptGrowsTheJob) {
  // Worker 0 lists a third slot; worker 2 starts and joins generation 1.
  const DiscoveryScript discovery("localhost:2");
  const LaunchResult run = RunLauncher(
      Concat({"-np", "2", "--min-np", "1", "--host-discovery-script", discovery.script()},
             Shell(absl::StrCat("case $COLLECTIVE_ELASTIC_WORKER in 0) echo localhost:3 > '",
                                discovery.hosts(), "'; exec ", AwaitWorld(false),
                                ";; 2) echo rank $COLLECTIVE_LOCAL_RANK of $COLLECTIVE_LOCAL_SIZE "
                                "generation $COLLECTIVE_ELASTIC_GENERATION; exit 0;; *) exec ",
                                AwaitWorld(false), ";; esac"))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_THAT(run.err,
              HasSubstr("collectiverun: the host discovery script lists 3 slots: worker "
                        "2 added on localhost; the job re-forms with 3 workers as generation 1"));
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>({"[0] worker 0 sees generation 1 1 [0, 1, 2]",
                                          "[1] worker 1 sees generation 1 1 [0, 1, 2]",
                                          "[2] rank 2 of 3 generation 1"}))
      << run.out;
}

TEST(LauncherTest, AMachineThatCannotBeReachedIsLeftOutWhileTheJobGrowsOnTheOthers) {
  // Worker 0 lists a slot more here and one on a machine that ssh cannot
  // reach: that machine is blacklisted (no worker started there), and the
  // job grows by the slot here alone.
  const DiscoveryScript discovery("localhost:1");
  const LaunchResult run = RunLauncher(
      Concat(
          {"-np", "1", "--min-np", "1", "--host-discovery-script", discovery.script()},
          Shell(absl::StrCat("case $COLLECTIVE_ELASTIC_WORKER in 0) printf 'localhost:2\\n"
                             "unreachable.invalid:1\\n' > '",
                             discovery.hosts(), "'; exec ", AwaitWorld(false),
                             ";; *) echo worker $COLLECTIVE_ELASTIC_WORKER of "
                             "$COLLECTIVE_LOCAL_SIZE generation $COLLECTIVE_ELASTIC_GENERATION;; "
                             "esac"))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr("cannot start collectiverun's agent on unreachable.invalid"));
  EXPECT_THAT(run.err, HasSubstr("; blacklisting the host for good"));
  EXPECT_THAT(run.err, HasSubstr("worker 1 added on localhost; the job re-forms with 2 workers"));
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>(
                  {"[0] worker 0 sees generation 1 1 [0, 1]", "[1] worker 1 of 2 generation 1"}))
      << run.out;
}

TEST(LauncherTest, AHostDiscoveryScriptsJobStartsOnEverySlotListedUpToMaxNp) {
  // As horovodrun's driver: -np 1, but the script lists 3 slots and
  // --max-np allows 2: two workers start, in one generation.
  const DiscoveryScript discovery("localhost:3");
  const LaunchResult run = RunLauncher(
      Concat({"-np", "1", "--max-np", "2", "--host-discovery-script", discovery.script()},
             Shell("echo worker $COLLECTIVE_ELASTIC_WORKER of $COLLECTIVE_LOCAL_SIZE generation "
                   "$COLLECTIVE_ELASTIC_GENERATION")),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_TRUE(LineSet(run.out) == std::multiset<std::string>({"[0] worker 0 of 2 generation 0",
                                                              "[1] worker 1 of 2 generation 0"}))
      << run.out;
}

TEST(LauncherTest, AHostDiscoveryScriptShrinksTheJob) {
  // Every worker joins generation 0 (its marker, as init() writes it);
  // worker 0 lists a slot fewer; worker 2, the newest, is stopped, and the
  // others go on in generation 1. A stopped worker is not a failure.
  const DiscoveryScript discovery("localhost:3");
  const LaunchResult run = RunLauncher(
      Concat({"-np", "3", "--min-np", "2", "--host-discovery-script", discovery.script()},
             Shell(absl::StrCat(
                 ": > \"$COLLECTIVE_ELASTIC_DIR/joining-0-$COLLECTIVE_ELASTIC_WORKER\"; "
                 "case $COLLECTIVE_ELASTIC_WORKER in 0) echo localhost:2 > '",
                 discovery.hosts(), "'; exec ", AwaitWorld(), ";; 2) exec sleep 1000;; *) exec ",
                 AwaitWorld(), ";; esac"))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_TRUE(std::regex_search(
      run.err, std::regex(R"(collectiverun: the host discovery script lists 2 slots: stopping )"
                          R"(worker 2 \(pid \d+\)\n)")))
      << run.err;
  EXPECT_THAT(run.err, HasSubstr("was killed by signal 15 (SIGTERM); re-forming the job with 2 "
                                 "workers as generation 1"));
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>({"[0] worker 0 sees generation 1 1 [0, 1]",
                                          "[1] worker 1 sees generation 1 1 [0, 1]"}))
      << run.out;
}

TEST(LauncherTest, AHostDiscoveryScriptsHostsAreNodesWithADaemonEach) {
  // localhost (2 slots) and 127.0.0.1 (1 slot) are two stand-in nodes: the
  // ranks are grouped by node, and once the daemons serve (the marker
  // init() waits for), each worker's daemon, its host's, answers on its
  // socket.
  const DiscoveryScript discovery("localhost:2\n127.0.0.1:1");
  const LaunchResult run = RunLauncher(
      Concat({"-np", "3", "--host-discovery-script", discovery.script()},
             Shell(absl::StrCat(
                 "exec /usr/bin/python3 -c \"import importlib.util as u, os, socket; "
                 "s = u.spec_from_file_location('r', '",
                 COLLECTIVE_SOURCE_DIR,
                 "/client/python/collective/common/elastic_rendezvous.py'); "
                 "r = u.module_from_spec(s); s.loader.exec_module(r); "
                 "r.join_latest_generation(); e = os.environ; "
                 "socket.socket(socket.AF_UNIX).connect(e['COLLECTIVE_SOCKET']); "
                 "print('worker', r.worker(), 'on', e['COLLECTIVE_ELASTIC_HOST'], 'rank', "
                 "e['HOROVOD_RANK'], 'of', e['HOROVOD_SIZE'], 'local', e['COLLECTIVE_LOCAL_RANK'], "
                 "'of', e['COLLECTIVE_LOCAL_SIZE'], 'node', e['HOROVOD_CROSS_RANK'], 'of', "
                 "e['HOROVOD_CROSS_SIZE'], os.path.basename(e['COLLECTIVE_SOCKET']))\""))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>(
                  {"[0] worker 0 on localhost rank 0 of 3 local 0 of 2 node 0 of 2 host0.sock",
                   "[1] worker 1 on localhost rank 1 of 3 local 1 of 2 node 0 of 2 host0.sock",
                   "[2] worker 2 on 127.0.0.1 rank 2 of 3 local 0 of 1 node 1 of 2 host1.sock"}))
      << run.out << run.err;
}

TEST(LauncherTest, TheJobGoesOnWhileANewWorldOfDaemonsStarts) {
  // Two nodes; worker 0 drops node 1 from the discovery script's list, so
  // that worker 1 stops and the job's next generation needs daemons of
  // node 0 alone. That world's collectived (a wrapper, through --daemon)
  // starts only once collectiverun has copied a line worker 0 prints after
  // the start began into --output-filename: a launcher that waited for the
  // daemons in its loop would copy nothing meanwhile, and the start would
  // fail.
  const std::string dir = absl::StrCat(::testing::TempDir(), "/worlds-", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string daemon = dir + "/collectived.sh";
  std::ofstream(daemon) << "#!/bin/sh\n"
                        << "case \"$2\" in *host0.sock) mkdir '" << dir
                        << "/host0' 2>/dev/null || { : > '" << dir << "/starting'; i=0; "
                        << "until grep -qs 'sees the daemons start' '" << dir
                        << "'/out/rank.*/stdout; do i=$((i + 1)); "
                        << "[ $i -gt 1000 ] && exit 1; sleep 0.01; done; };; esac\n"
                        << "exec '" << CollectivedBinary() << "' \"$@\"\n";
  ::chmod(daemon.c_str(), 0700);
  const DiscoveryScript discovery("localhost:1\n127.0.0.1:1");
  const std::string python = absl::StrCat(
      "/usr/bin/python3 -c \"import importlib.util as u, os, socket, sys, time; "
      "s = u.spec_from_file_location('r', '",
      COLLECTIVE_SOURCE_DIR,
      "/client/python/collective/common/elastic_rendezvous.py'); "
      "r = u.module_from_spec(s); s.loader.exec_module(r); e = os.environ; "
      "r.join_latest_generation(); "
      "socket.socket(socket.AF_UNIX).connect(e['COLLECTIVE_SOCKET']); "
      "w = r.worker(); g = e['COLLECTIVE_ELASTIC_GENERATION']; "
      "print('worker', w, 'generation', g, os.path.basename(e['COLLECTIVE_SOCKET']), flush=True); "
      "w == 1 and time.sleep(1000); "
      "open('",
      discovery.hosts(), ".new', 'w').write('localhost:1\\\\n'); os.replace('", discovery.hosts(),
      ".new', '", discovery.hosts(),
      "'); r.wait_for_next_world(False); r.join_latest_generation(); "
      "socket.socket(socket.AF_UNIX).connect(e['COLLECTIVE_SOCKET']); "
      "print('worker', w, 'generation', e['COLLECTIVE_ELASTIC_GENERATION'], "
      "os.path.basename(e['COLLECTIVE_SOCKET']))\"");
  const LaunchResult run = RunLauncher(
      Concat(
          {"--daemon", daemon, "--output-filename", dir + "/out", "-np", "2", "--min-np", "1",
           "--host-discovery-script", discovery.script()},
          Shell(absl::StrCat("if [ $COLLECTIVE_ELASTIC_WORKER = 0 ]; then ( i=0; until [ -e '", dir,
                             "/starting' ]; do i=$((i + 1)); [ $i -gt 1000 ] && exit 1; "
                             "sleep 0.01; done; echo worker 0 sees the daemons start ) & fi; "
                             "exec ",
                             python))),
      kElasticPrivateDaemon);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>(
                  {"[0] worker 0 generation 0 host0.sock", "[1] worker 1 generation 0 host1.sock",
                   "[0] worker 0 sees the daemons start", "[0] worker 0 generation 1 host0.sock"}))
      << run.out << "stderr:\n"
      << run.err;
}

// A rank that connects to its daemon (COLLECTIVE_SOCKET; fails if none
// listens) and prints `fields` (a Python expression list over the
// environment `e`) and its socket's file name.
std::vector<std::string> ConnectAndPrint(const std::string& fields) {
  return Shell(
      absl::StrCat("exec /usr/bin/python3 -c \"import os, socket; e = os.environ; "
                   "socket.socket(socket.AF_UNIX).connect(e['COLLECTIVE_SOCKET']); "
                   "print(",
                   fields, ", os.path.basename(e['COLLECTIVE_SOCKET']))\""));
}

TEST(LauncherTest, HorovodrunsHostsAreStandInNodes) {
  // -H localhost:2,127.0.0.1:2 with -np 3: two ranks on the first node, one
  // on the second, each node's daemon one of an MPI world that mpirun
  // started; each rank's place, and a daemon on its socket.
  const LaunchResult run = RunLauncher(
      Concat({"--verbose", "-np", "3", "-H", "localhost:2,127.0.0.1:2"},
             ConnectAndPrint("'rank', e['HOROVOD_RANK'], 'of', e['WORLD_SIZE'], 'local', "
                             "e['COLLECTIVE_LOCAL_RANK'], 'of', e['COLLECTIVE_LOCAL_SIZE'], "
                             "'node', e['HOROVOD_CROSS_RANK'], 'of', e['HOROVOD_CROSS_SIZE']")));
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>({"[0] rank 0 of 3 local 0 of 2 node 0 of 2 node0.sock",
                                          "[1] rank 1 of 3 local 1 of 2 node 0 of 2 node0.sock",
                                          "[2] rank 2 of 3 local 0 of 1 node 1 of 2 node1.sock"}))
      << run.out;
  EXPECT_THAT(run.err, HasSubstr("collectiverun: the 2 collectived of mpirun (pid "));
}

TEST(LauncherTest, AnElasticJobsFirstDaemonsServeBeforeItsWorkersStart) {
  // An elastic job on two hosts: each worker connects to its daemon at
  // once, without waiting for the rendezvous to say the daemons serve.
  const LaunchResult run = RunLauncher(
      Concat({"--elastic", "-np", "2", "-H", "localhost:1,127.0.0.1:1"},
             ConnectAndPrint("'worker', e['COLLECTIVE_ELASTIC_WORKER'], 'node', "
                             "e['HOROVOD_CROSS_RANK'], 'of', e['HOROVOD_CROSS_SIZE']")));
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>(
                  {"[0] worker 0 node 0 of 2 host0.sock", "[1] worker 1 node 1 of 2 host1.sock"}))
      << run.out;
}

TEST(LauncherTest, AWorkerThatIgnoresItsStopIsKilledAfterTheGracePeriod) {
  // As above, but worker 2 ignores SIGTERM: SIGKILL follows --grace-seconds.
  const DiscoveryScript discovery("localhost:3");
  const LaunchResult run = RunLauncher(
      Concat({"-np", "3", "--min-np", "2", "--grace-seconds", "1", "--host-discovery-script",
              discovery.script()},
             Shell(absl::StrCat(
                 ": > \"$COLLECTIVE_ELASTIC_DIR/joining-0-$COLLECTIVE_ELASTIC_WORKER\"; "
                 "case $COLLECTIVE_ELASTIC_WORKER in 0) echo localhost:2 > '",
                 discovery.hosts(), "'; exec ", AwaitWorld(),
                 ";; 2) trap '' TERM; exec sleep 1000;; *) exec ", AwaitWorld(), ";; esac"))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr("was killed by signal 9 (SIGKILL); re-forming the job with 2 "
                                 "workers as generation 1"));
  EXPECT_TRUE(LineSet(run.out) ==
              std::multiset<std::string>({"[0] worker 0 sees generation 1 1 [0, 1]",
                                          "[1] worker 1 sees generation 1 1 [0, 1]"}))
      << run.out << "stderr:\n"
      << run.err;
}

// A worker that waits for a generation whose workers `condition` (a Python
// expression over the list `w`) accepts, and prints them.
std::string AwaitWorkers(const std::string& condition) {
  return absl::StrCat(
      "/usr/bin/python3 -c \"import importlib.util as u; s = u.spec_from_file_location('r', '",
      COLLECTIVE_SOURCE_DIR,
      "/client/python/collective/common/elastic_rendezvous.py'); r = u.module_from_spec(s); "
      "s.loader.exec_module(r); "
      "world = r._wait_until(lambda: (lambda g: g if (lambda w: ",
      condition,
      ")(g.workers) else None)(r.read_world()), 'the workers'); "
      "print('worker', r.worker(), 'sees workers', world.workers)\"");
}

TEST(LauncherTest, AFailedWorkersHostIsBlacklistedAndTheJobGoesOnWithoutIt) {
  // Worker 0 on localhost, workers 1 and 2 on 127.0.0.1. Worker 2 fails:
  // as Horovod's driver does, its host is blacklisted, worker 1 stops with
  // it, and the job re-forms on localhost alone.
  const DiscoveryScript discovery("localhost:1\n127.0.0.1:2");
  const LaunchResult run = RunLauncher(
      Concat({"-np", "3", "--min-np", "1", "--host-discovery-script", discovery.script()},
             Shell(absl::StrCat("case $COLLECTIVE_ELASTIC_WORKER in 0) exec ",
                                AwaitWorkers("w == [0]"),
                                ";; 1) exec sleep 1000;; 2) exit 3;; esac"))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_TRUE(std::regex_search(
      run.err, std::regex(R"(collectiverun: worker 2 \(pid \d+\) exited with code 3; )"
                          R"(blacklisting host 127.0.0.1 for good; re-forming the job with 2 )"
                          R"(workers as generation 1)")))
      << run.err;
  EXPECT_TRUE(std::regex_search(
      run.err,
      std::regex(R"(collectiverun: host 127.0.0.1 is blacklisted: stopping worker 1 \(pid \d+\))")))
      << run.err;
  EXPECT_THAT(run.err, Not(HasSubstr("added on 127.0.0.1"))) << "the host stays out";
  EXPECT_TRUE(LineSet(run.out) == std::multiset<std::string>({"[0] worker 0 sees workers [0]"}))
      << run.out;
}

TEST(LauncherTest, AFailedWorkerOnTheJobsOnlyHostEndsTheJob) {
  // Horovod's driver stops once every host of the job is blacklisted.
  const DiscoveryScript discovery("localhost:2");
  const LaunchResult run = RunLauncher(
      Concat({"-np", "2", "--min-np", "1", "--host-discovery-script", discovery.script()},
             Shell("case $COLLECTIVE_ELASTIC_WORKER in 0) exec sleep 1000;; 1) exit 3;; esac")),
      kElasticPrivateDaemon);
  EXPECT_EQ(run.exit_code, 3) << run.how << "\nstderr:\n" << run.err;
  EXPECT_TRUE(std::regex_search(
      run.err, std::regex(R"(collectiverun: worker 1 \(pid \d+\) exited with code 3; )"
                          R"(blacklisting host localhost for good; every host of the job is )"
                          R"(blacklisted; stopping the other 1 rank)")))
      << run.err;
}

TEST(LauncherTest, AnElasticJobOnHorovodrunsHostsStartsOnEverySlotAndBlacklistsAFailedHost) {
  // Horovod's test_fault_tolerance_without_scaling: -np 2 --min-np 2 -H
  // localhost:2,127.0.0.1:2 (--min-np makes it elastic) starts a worker on
  // each of the 4 slots; worker 0 fails, localhost is blacklisted with
  // worker 1, and workers 2 and 3 go on.
  const LaunchResult run = RunLauncher(
      Concat({"-np", "2", "--min-np", "2", "-H", "localhost:2,127.0.0.1:2"},
             Shell(absl::StrCat("case $COLLECTIVE_ELASTIC_WORKER in 0) exit 3;; 1) exec sleep "
                                "1000;; *) exec ",
                                AwaitWorkers("w == [2, 3]"), ";; esac"))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_TRUE(std::regex_search(
      run.err, std::regex(R"(collectiverun: worker 0 \(pid \d+\) exited with code 3; )"
                          R"(blacklisting host localhost for good; re-forming the job with 3 )"
                          R"(workers as generation 1)")))
      << run.err;
  EXPECT_TRUE(LineSet(run.out) == std::multiset<std::string>({"[2] worker 2 sees workers [2, 3]",
                                                              "[3] worker 3 sees workers [2, 3]"}))
      << run.out << "stderr:\n"
      << run.err;
}

TEST(LauncherTest, ABlacklistedHostComesBackAfterItsCooldown) {
  // --blacklist-cooldown-range 1 1: worker 1's host is out for a second,
  // then the script's next run adds worker 2 there.
  const DiscoveryScript discovery("localhost:1\n127.0.0.1:1");
  const LaunchResult run = RunLauncher(
      Concat(
          {"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "1", "1",
           "--host-discovery-script", discovery.script()},
          Shell(absl::StrCat("case $COLLECTIVE_ELASTIC_WORKER in 0) exec ", AwaitWorkers("2 in w"),
                             ";; 1) exit 3;; 2) echo worker 2 on $COLLECTIVE_ELASTIC_HOST;; "
                             "esac"))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr("exited with code 3; blacklisting host 127.0.0.1 for 1s; "
                                 "re-forming the job with 1 worker as generation 1"));
  EXPECT_THAT(run.err,
              HasSubstr("host 127.0.0.1's blacklist cooldown is over; it may run workers again"));
  EXPECT_THAT(run.err, HasSubstr("worker 2 added on 127.0.0.1"));
  EXPECT_TRUE(LineSet(run.out) == std::multiset<std::string>({"[0] worker 0 sees workers [0, 2]",
                                                              "[2] worker 2 on 127.0.0.1"}))
      << run.out;
}

TEST(LauncherTest, AFailureBelowMinNpWaitsForSlotsAsHorovodsDriverDoes) {
  // --min-np 4 on 4 slots: worker 3 fails, 127.0.0.1 is blacklisted for a
  // second and worker 2 stops with it. Two workers are left, fewer than
  // --min-np: they wait, and once the cooldown is over two new workers
  // start on 127.0.0.1 in one generation, which the survivors join.
  const LaunchResult run = RunLauncher(
      Concat({"-np", "4", "--min-np", "4", "-H", "localhost:2,127.0.0.1:2",
              "--blacklist-cooldown-range", "1", "1"},
             Shell(absl::StrCat("case $COLLECTIVE_ELASTIC_WORKER in 0|1) exec ",
                                AwaitWorkers("w == [0, 1, 4, 5]"),
                                ";; 2) exec sleep 1000;; 3) exit 3;; *) echo worker "
                                "$COLLECTIVE_ELASTIC_WORKER on $COLLECTIVE_ELASTIC_HOST;; esac"))),
      kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr("exited with code 3; blacklisting host 127.0.0.1 for 1s; 3 "
                                 "workers remain, fewer than --min-np 4: waiting up to 10m"));
  EXPECT_THAT(run.err, HasSubstr("was killed by signal 15 (SIGTERM); 2 workers remain, fewer "
                                 "than --min-np 4: waiting up to"));
  EXPECT_THAT(run.err, HasSubstr("-H lists 4 slots: workers 4, 5 added on 127.0.0.1; the job "
                                 "re-forms with 4 workers as generation 1"));
  EXPECT_TRUE(LineSet(run.out) == std::multiset<std::string>(
                                      {"[0] worker 0 sees workers [0, 1, 4, 5]",
                                       "[1] worker 1 sees workers [0, 1, 4, 5]",
                                       "[4] worker 4 on 127.0.0.1", "[5] worker 5 on 127.0.0.1"}))
      << run.out << "stderr:\n"
      << run.err;
}

TEST(LauncherTest, AFailureBelowMinNpStopsTheJobAfterTheElasticTimeout) {
  // As above, but 127.0.0.1 stays out for good: no slots come within
  // --elastic-timeout 1, and the job stops.
  const LaunchResult run = RunLauncher(
      Concat(
          {"-np", "4", "--min-np", "4", "-H", "localhost:2,127.0.0.1:2", "--elastic-timeout", "1"},
          Shell("case $COLLECTIVE_ELASTIC_WORKER in 3) exit 3;; *) exec sleep 1000;; esac")),
      kElasticPrivateDaemon);
  EXPECT_EQ(run.exit_code, 1) << run.how << "\nstderr:\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr("exited with code 3; blacklisting host 127.0.0.1 for good; 3 "
                                 "workers remain, fewer than --min-np 4: waiting up to 1s"));
  EXPECT_THAT(run.err, HasSubstr("-H has listed fewer than --min-np 4 slots for 1s; stopping the "
                                 "2 ranks"));
}

TEST(LauncherTest, Sigusr1AddsNoWorkerToAJobOnListedHosts) {
  // -H's slots decide: a worker SIGUSR1 added would only be stopped again.
  const LaunchResult run =
      RunLauncher(Concat({"--elastic", "-np", "1", "-H", "localhost:1"},
                         Shell("kill -USR1 $PPID; echo worker $COLLECTIVE_ELASTIC_WORKER")),
                  kElasticPrivateDaemon);
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstderr:\n" << run.err;
  EXPECT_THAT(run.err,
              HasSubstr("SIGUSR1 adds no worker to a job on listed hosts: -H decides its slots"));
  EXPECT_THAT(run.err, Not(HasSubstr("added")));
  EXPECT_TRUE(LineSet(run.out) == std::multiset<std::string>({"[0] worker 0"})) << run.out;
}

// horovodrun's -prefix-timestamp: the time, as Python's time.asctime()
// writes it, before each line's prefix.
TEST(LauncherTest, PrefixOutputWithTimestampStartsEachLineWithTheTime) {
  const LaunchResult run = RunLauncher(
      Concat({"-prefix-timestamp", "-np", "2"}, Shell("echo \"out $COLLECTIVE_LOCAL_RANK\"")));
  ASSERT_EQ(run.exit_code, 0) << run.how << run.err;
  static const std::regex kLine(
      R"([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\[(\d)\] out (\d))");
  std::set<std::string> ranks;
  for (const std::string& line : Lines(run.out)) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, kLine)) << line;
    EXPECT_EQ(match[1], match[2]) << line;
    ranks.insert(match[1]);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1"})) << run.out;
}

#ifdef PYTHON_PACKAGE_DIR
// horovodrun --check-build: the frameworks are those the Python on PATH
// imports through this package; no -np, no job.
TEST(LauncherTest, CheckBuildSaysWhatThePythonOnPathImports) {
  const std::string python_dir = std::filesystem::path(PYTHON_EXECUTABLE).parent_path().string();
  const std::string path = python_dir + ":/usr/bin:/bin";
  LaunchResult run = RunLauncher({"-cb"}, {{"PATH", path}, {"PYTHONPATH", PYTHON_PACKAGE_DIR}});
  ASSERT_EQ(run.exit_code, 0) << run.how << run.err;
  EXPECT_THAT(run.out, HasSubstr("collectived v"));
  EXPECT_THAT(run.out, HasSubstr("Available Frameworks:\n    [ ] TensorFlow\n    [X] PyTorch\n"
                                 "    [ ] MXNet\n"));
  EXPECT_THAT(run.out, HasSubstr("Available Controllers:\n    [X] MPI\n    [ ] Gloo\n"));
  EXPECT_THAT(run.out, HasSubstr("    [ ] DDL\n    [ ] CCL\n    [X] MPI\n    [ ] Gloo\n"));

  // Without the package on its path, that Python has no PyTorch of ours.
  run = RunLauncher({"--check-build"}, {{"PATH", path}, {"PYTHONPATH", ""}});
  ASSERT_EQ(run.exit_code, 0) << run.how << run.err;
  EXPECT_THAT(run.out, HasSubstr("    [ ] PyTorch\n"));

  // The command's own --check-build is the command's.
  run = RunLauncher({"-np", "1", "echo", "--check-build"});
  ASSERT_EQ(run.exit_code, 0) << run.how << run.err;
  EXPECT_EQ(run.out, "[0] --check-build\n");
  run = RunLauncher({"echo", "--check-build"});
  EXPECT_EQ(run.exit_code, 2) << run.how;
  EXPECT_THAT(run.err, HasSubstr("--np is required"));
}
#endif

TEST(LauncherTest, AHostDiscoveryScriptThatCannotServeTheJobStopsIt) {
  // Another machine that ssh cannot reach: its agent does not start.
  const DiscoveryScript remote("localhost:1\nnode-that-is-not-here.invalid:4");
  LaunchResult run = RunLauncher({"-np", "2", "--host-discovery-script", remote.script(), "true"});
  EXPECT_EQ(run.exit_code, 1) << run.how << "\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr("cannot start collectiverun's agent on "
                                 "node-that-is-not-here.invalid (ssh "));

  // Fewer slots than -np (horovodrun's driver waits for as many), for
  // longer than --elastic-timeout, although --min-np would be met.
  const DiscoveryScript few("localhost:1");
  run = RunLauncher({"-np", "2", "--min-np", "1", "--elastic-timeout", "1",
                     "--host-discovery-script", few.script(), "true"});
  EXPECT_EQ(run.exit_code, 1) << run.how << "\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr("waiting up to 1s for the host discovery script to list "
                                 "-np 2 slots (it lists 1)"));
  EXPECT_THAT(run.err, HasSubstr("did not list -np 2 slots within 1s (it lists 1)"));
}

TEST(LauncherTest, AHungDiscoveryScriptHoldsNothingUp) {
  // The script's second run tells the worker (through a FIFO) that it hangs
  // now, and hangs for a minute; the worker then says so and exits. The
  // script runs beside collectiverun's loop, so the worker's output and exit
  // are taken at once and the job ends, the run killed, long before the
  // script's 10 s deadline would have passed (a loop that waited for the
  // script would have reported it: "ran longer than 10s").
  const std::string base = absl::StrCat(::testing::TempDir(), "/hung-discovery-", ::getpid());
  const std::string fifo = base + ".fifo";
  const std::string script = base + ".sh";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(script) << "#!/bin/sh\n[ -e '" << base << ".ran' ] || { : > '" << base
                        << ".ran'; echo localhost:1; exit 0; }\necho hung > '" << fifo
                        << "'\nexec sleep 60\n";
  ::chmod(script.c_str(), 0700);
  const LaunchResult run = RunLauncher(
      Concat({"-np", "1", "--host-discovery-script", script},
             Shell(absl::StrCat("read said < '", fifo, "'; echo the script $said; exit 0"))));
  std::filesystem::remove(fifo);
  std::filesystem::remove(script);
  std::filesystem::remove(base + ".ran");
  ASSERT_EQ(run.exit_code, 0) << run.how << "\nstdout:\n" << run.out << "stderr:\n" << run.err;
  EXPECT_EQ(run.out, "[0] the script hung\n");
  EXPECT_THAT(run.err, Not(HasSubstr("ran longer than")));
}

}  // namespace
}  // namespace collective::testing
