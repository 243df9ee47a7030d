// The life of jobs and of the daemon: a client killed mid-allreduce, a job
// that never forms, a rank killed while forming, a registration cancelled
// while forming, inconsistent registrations,
// a rank that leaves while another waits on it, SIGTERM with requests
// pending, SIGTERM in any state with a notification socket nobody reads, a
// daemon killed under its clients and its successor on the same
// socket, a hung daemon, a second daemon on a socket already served, jobs
// back to back, and ranks that start before their daemon. Every test ends with no process, socket
// or shared-memory segment left behind.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/common/temporary_directory.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

// How long the surviving clients may take to hear that their job or daemon
// is gone.
constexpr int kFailureBoundSeconds = 5;
constexpr absl::Duration kFailureBound = absl::Seconds(kFailureBoundSeconds);
constexpr absl::Duration kStateTimeout = absl::Seconds(10);
constexpr absl::Duration kJobTimeout = absl::Seconds(60);

// Small tensors keep the matrix quick; its checks are the same.
const std::vector<std::string> kMatrix = {"matrix", "--big-bytes", "4096"};

double MonotonicSeconds() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

// The worker prints "failed at monotonic S" when its collective failed.
std::optional<double> FailedAt(const std::string& output) {
  constexpr absl::string_view kPrefix = "failed at monotonic ";
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    double seconds = 0;
    if (absl::ConsumePrefix(&line, kPrefix) && absl::SimpleAtod(line, &seconds)) return seconds;
  }
  return std::nullopt;
}

// Each worker failed at most kFailureBoundSeconds after `event` (monotonic).
void ExpectFailedSoonAfter(double event, std::vector<Subprocess*> workers) {
  for (Subprocess* worker : workers) {
    const std::string output = worker->Stdout();
    const std::optional<double> failed = FailedAt(output);
    ASSERT_TRUE(failed.has_value()) << "pid " << worker->pid() << " printed:\n" << output;
    EXPECT_GE(*failed, event);
    EXPECT_LT(*failed - event, kFailureBoundSeconds) << "pid " << worker->pid();
  }
}

bool Idle(const v1::StatusResponse& status) { return status.job().state() == v1::JOB_STATE_IDLE; }

// The daemon went back to idle and removed every segment of the job.
void ExpectIdleAndClean(const DaemonProcess& daemon) {
  auto idle = daemon.AwaitStatus(Idle, kStateTimeout);
  ASSERT_TRUE(idle.ok()) << idle.status();
  const std::vector<std::string> left = daemon.Segments();
  EXPECT_TRUE(left.empty()) << "left: " << absl::StrJoin(left, ", ");
}

std::string Pid(const Subprocess& process) { return std::to_string(process.pid()); }

class ClientKilledTest : public ::testing::TestWithParam<int> {};

TEST_P(ClientKilledTest, OthersFailNamingTheDeadRankAndTheDaemonServesANewJob) {
  const int k = GetParam();
  const int last = k - 1;
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  // The victim first, so that the others can expect its pid in their error.
  auto victim = (*daemon)->StartWorker(TestWorkerBinary(), last, k, {"victim"});
  ASSERT_TRUE(victim.ok()) << victim.status();
  const std::string dead = absl::StrCat("rank ", last, " (pid ", Pid(*victim), ") disconnected");
  std::vector<Subprocess> waiters;
  for (int rank = 0; rank < last; ++rank) {
    auto waiter =
        (*daemon)->StartWorker(TestWorkerBinary(), rank, k, {"wait-stuck", "--expect", dead});
    ASSERT_TRUE(waiter.ok()) << waiter.status();
    waiters.push_back(std::move(*waiter));
  }
  // Mid-allreduce: every other rank waits on 'stuck', the victim on its own.
  auto blocked = (*daemon)->AwaitStatus(
      [&](const v1::StatusResponse& s) {
        return HasPending(s, "stuck", last) && HasPending(s, "victim", 1);
      },
      kStateTimeout);
  ASSERT_TRUE(blocked.ok()) << blocked.status();

  const double killed_at = MonotonicSeconds();
  victim->Signal(SIGKILL);
  const auto victim_status = victim->Wait(kFailureBound);
  ASSERT_TRUE(victim_status.has_value());
  EXPECT_TRUE(WIFSIGNALED(*victim_status));
  EXPECT_EQ(WaitForWorkers(waiters, kFailureBound), "");
  std::vector<Subprocess*> pointers;
  for (Subprocess& waiter : waiters) {
    pointers.push_back(&waiter);
    EXPECT_NE(waiter.Stdout().find(
                  absl::StrCat("ABORTED: ", dead,
                               " from collectived without leaving job 'default' (it died "
                               "or closed its session); the job cannot continue")),
              std::string::npos)
        << waiter.Stdout();
  }
  ExpectFailedSoonAfter(killed_at, pointers);
  EXPECT_NE(
      (*daemon)->process().Stderr().find(absl::StrCat(
          "job 'default': rank ", last, " (pid ", Pid(*victim), ") disconnected without leaving")),
      std::string::npos)
      << (*daemon)->process().Stderr();

  // Still serving; the failed job is gone with its segments.
  ExpectIdleAndClean(**daemon);
  auto workers = (*daemon)->StartWorkers(TestWorkerBinary(), k, kMatrix);
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, kJobTimeout), "");
  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().jobs(), 2u);
  ExpectIdleAndClean(**daemon);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

INSTANTIATE_TEST_SUITE_P(Clients, ClientKilledTest, ::testing::Values(2, 4),
                         [](const auto& test_info) {
                           return absl::StrCat(test_info.param, "Clients");
                         });

TEST(RegisterTimeoutTest, IncompleteJobFailsNamingTheMissingRanks) {
  auto flags = SmallMemoryFlags();
  flags.insert(flags.end(), {"--register-timeout-seconds", "1"});
  auto daemon = DaemonProcess::Start({.flags = flags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::vector<Subprocess> workers;
  for (int rank = 0; rank < 2; ++rank) {
    auto worker = (*daemon)->StartWorker(TestWorkerBinary(), rank, 4,
                                         {"connect-error", "--expect", "never registered"});
    ASSERT_TRUE(worker.ok()) << worker.status();
    workers.push_back(std::move(*worker));
  }
  EXPECT_EQ(WaitForWorkers(workers, absl::Seconds(15)), "");
  for (Subprocess& worker : workers) {
    EXPECT_EQ(worker.Stdout(),
              "error: DEADLINE_EXCEEDED: job 'default' did not form within 1 s: local ranks 2, 3 "
              "of 4 never registered\n");
  }
  ExpectIdleAndClean(**daemon);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

TEST(RegisterTimeoutTest, RankKilledWhileFormingFreesItsPlace) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto early = (*daemon)->StartWorker(TestWorkerBinary(), 0, 2, kMatrix);
  ASSERT_TRUE(early.ok()) << early.status();
  auto forming = (*daemon)->AwaitStatus(
      [](const v1::StatusResponse& s) { return s.job().registered() == 1; }, kStateTimeout);
  ASSERT_TRUE(forming.ok()) << forming.status();
  ASSERT_FALSE((*daemon)->Segments().empty());
  early->Signal(SIGKILL);
  ASSERT_TRUE(early->Wait(kFailureBound).has_value());
  ExpectIdleAndClean(**daemon);

  auto workers = (*daemon)->StartWorkers(TestWorkerBinary(), 2, kMatrix);
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, kJobTimeout), "");
  ExpectIdleAndClean(**daemon);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

TEST(RegisterTimeoutTest, ACancelledRegistrationIsForgotten) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto waiting = (*daemon)->StartWorker(TestWorkerBinary(), 0, 2, {"cancel-on-signal"});
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  auto forming = (*daemon)->AwaitStatus(
      [](const v1::StatusResponse& s) { return s.job().registered() == 1; }, kStateTimeout);
  ASSERT_TRUE(forming.ok()) << forming.status();
  waiting->Signal(SIGUSR1);
  const auto cancelled = waiting->Wait(kFailureBound);
  EXPECT_TRUE(ExitedCleanly(cancelled))
      << (cancelled ? waiting->Describe(*cancelled) : "still runs") << waiting->Stderr();
  EXPECT_EQ(waiting->Stdout(),
            "error: CANCELLED: the registration was cancelled while the job formed\n");
  // The daemon forgot it: no job, no segment, and a new job of 2 forms.
  ExpectIdleAndClean(**daemon);
  auto workers = (*daemon)->StartWorkers(TestWorkerBinary(), 2, kMatrix);
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, kJobTimeout), "");
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

// Starts local rank 0 of a job of 2 running the matrix and waits until it
// is registered, so that a later registration meets a forming job.
absl::StatusOr<Subprocess> StartFirstRank(const DaemonProcess& daemon) {
  auto first = daemon.StartWorker(TestWorkerBinary(), 0, 2, kMatrix);
  if (!first.ok()) return first.status();
  auto forming = daemon.AwaitStatus(
      [](const v1::StatusResponse& s) {
        return s.job().state() == v1::JOB_STATE_FORMING && s.job().registered() == 1;
      },
      kStateTimeout);
  if (!forming.ok()) return forming.status();
  return first;
}

// `bad` was refused with `expected`; then local rank 1 of 2 completes the
// job that `first` started, which must run normally.
void ExpectRefusedAndJobCompletes(const DaemonProcess& daemon, Subprocess first, Subprocess bad,
                                  const std::string& expected) {
  const auto refused = bad.Wait(kStateTimeout);
  EXPECT_TRUE(ExitedCleanly(refused)) << (refused ? bad.Describe(*refused) : "still runs");
  EXPECT_EQ(bad.Stdout(), absl::StrCat("error: ", expected, "\n"));
  auto second = daemon.StartWorker(TestWorkerBinary(), 1, 2, kMatrix);
  ASSERT_TRUE(second.ok()) << second.status();
  std::vector<Subprocess> job;
  job.push_back(std::move(first));
  job.push_back(std::move(*second));
  EXPECT_EQ(WaitForWorkers(job, kJobTimeout), "");
  ExpectIdleAndClean(daemon);
}

TEST(InconsistentRegistrationTest, LocalSizeMismatchIsRefused) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto first = StartFirstRank(**daemon);
  ASSERT_TRUE(first.ok()) << first.status();
  auto bad = (*daemon)->StartWorker(TestWorkerBinary(), 1, 3,
                                    {"connect-error", "--expect", "local_size mismatch"});
  ASSERT_TRUE(bad.ok()) << bad.status();
  const std::string expected =
      absl::StrCat("INVALID_ARGUMENT: local_size mismatch for job 'default': local rank 0 (pid ",
                   Pid(*first), ") registered with local_size 2, this client says 3");
  ExpectRefusedAndJobCompletes(**daemon, std::move(*first), std::move(*bad), expected);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

TEST(InconsistentRegistrationTest, DuplicateLocalRankIsRefused) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto first = StartFirstRank(**daemon);
  ASSERT_TRUE(first.ok()) << first.status();
  auto bad = (*daemon)->StartWorker(TestWorkerBinary(), 0, 2,
                                    {"connect-error", "--expect", "already registered"});
  ASSERT_TRUE(bad.ok()) << bad.status();
  const std::string expected = absl::StrCat(
      "ALREADY_EXISTS: local rank 0 of job 'default' is already registered by pid ", Pid(*first));
  ExpectRefusedAndJobCompletes(**daemon, std::move(*first), std::move(*bad), expected);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

// A daemon serves several jobs: a second job runs to completion beside a
// first one that is stuck, and the first one's failure later leaves it
// alone.
TEST(InconsistentRegistrationTest, SecondJobRunsBesideAStuckOne) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto victim = (*daemon)->StartWorker(TestWorkerBinary(), 1, 2, {"victim"});
  ASSERT_TRUE(victim.ok()) << victim.status();
  auto waiter =
      (*daemon)->StartWorker(TestWorkerBinary(), 0, 2, {"wait-stuck", "--expect", "disconnected"});
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  auto blocked = (*daemon)->AwaitStatus(StuckJobBlocked, kStateTimeout);
  ASSERT_TRUE(blocked.ok()) << blocked.status();

  const std::map<std::string, std::string> other_job = {{"COLLECTIVE_JOB_ID", "other"}};
  auto workers = (*daemon)->StartWorkers(TestWorkerBinary(), 1, kMatrix, other_job);
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, kJobTimeout), "");
  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->job().id(), "default");
  EXPECT_EQ(status->job().state(), v1::JOB_STATE_RUNNING) << "'other' disturbed 'default'";

  victim->Signal(SIGKILL);
  EXPECT_TRUE(ExitedCleanly(waiter->Wait(kFailureBound))) << waiter->Stderr();
  ExpectIdleAndClean(**daemon);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

TEST(LeaveTest, WaiterFailsSayingTheRankLeft) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto leaver = (*daemon)->StartWorker(TestWorkerBinary(), 1, 2, {"leave-on-signal"});
  ASSERT_TRUE(leaver.ok()) << leaver.status();
  const std::string left = absl::StrCat("rank 1 (pid ", Pid(*leaver), ") has left job 'default'");
  auto waiter = (*daemon)->StartWorker(TestWorkerBinary(), 0, 2, {"wait-stuck", "--expect", left});
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  auto blocked = (*daemon)->AwaitStatus(
      [](const v1::StatusResponse& s) { return HasPending(s, "stuck", 1); }, kStateTimeout);
  ASSERT_TRUE(blocked.ok()) << blocked.status();

  const double left_at = MonotonicSeconds();
  leaver->Signal(SIGUSR1);
  std::vector<Subprocess> workers;
  workers.push_back(std::move(*waiter));
  workers.push_back(std::move(*leaver));
  EXPECT_EQ(WaitForWorkers(workers, kFailureBound), "");
  EXPECT_NE(workers[0].Stdout().find(
                absl::StrCat("FAILED_PRECONDITION: ", left,
                             " (it shut down); no collective of this job can complete any more")),
            std::string::npos)
      << workers[0].Stdout();
  ExpectFailedSoonAfter(left_at, {&workers[0]});
  EXPECT_EQ(workers[1].Stdout(), "connected as rank 1\nleft\n");
  ExpectIdleAndClean(**daemon);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

TEST(ShutdownTest, SigtermFailsPendingRequestsAndCleansUp) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto victim =
      (*daemon)->StartWorker(TestWorkerBinary(), 1, 2, {"victim", "--expect", "shutting down"});
  ASSERT_TRUE(victim.ok()) << victim.status();
  auto waiter =
      (*daemon)->StartWorker(TestWorkerBinary(), 0, 2, {"wait-stuck", "--expect", "shutting down"});
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  auto blocked = (*daemon)->AwaitStatus(StuckJobBlocked, kStateTimeout);
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  ASSERT_FALSE((*daemon)->Segments().empty());

  const double stopped_at = MonotonicSeconds();
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  std::vector<Subprocess> workers;
  workers.push_back(std::move(*waiter));
  workers.push_back(std::move(*victim));
  EXPECT_EQ(WaitForWorkers(workers, kFailureBound), "");
  for (Subprocess& worker : workers) {
    EXPECT_NE(worker.Stdout().find("UNAVAILABLE: collectived is shutting down (received SIGTERM)"),
              std::string::npos)
        << worker.Stdout();
  }
  ExpectFailedSoonAfter(stopped_at, {&workers[0], &workers[1]});
  EXPECT_FALSE(std::filesystem::exists((*daemon)->socket()));
  EXPECT_FALSE(std::filesystem::exists((*daemon)->socket() + ".lock"));
  EXPECT_TRUE((*daemon)->Segments().empty());
}

TEST(ShutdownTest, SigtermFailsRegistrationsOfAFormingJob) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto early = (*daemon)->StartWorker(TestWorkerBinary(), 0, 2,
                                      {"connect-error", "--expect", "shutting down"});
  ASSERT_TRUE(early.ok()) << early.status();
  auto forming = (*daemon)->AwaitStatus(
      [](const v1::StatusResponse& s) { return s.job().registered() == 1; }, kStateTimeout);
  ASSERT_TRUE(forming.ok()) << forming.status();
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  const auto exited = early->Wait(kFailureBound);
  EXPECT_TRUE(ExitedCleanly(exited)) << (exited ? early->Describe(*exited) : "still runs");
  EXPECT_EQ(early->Stdout(),
            "error: UNAVAILABLE: collectived is shutting down (received SIGTERM)\n");
  EXPECT_FALSE(std::filesystem::exists((*daemon)->socket()));
  EXPECT_TRUE((*daemon)->Segments().empty());
}

// A datagram socket for the daemon's sd_notify messages (NOTIFY_SOCKET)
// that nobody reads, filled until the kernel takes no more: what a
// supervisor that stopped reading leaves the daemon with (collectiverun did,
// once its private daemon was ready). Notifications must never make the
// daemon wait.
class UnreadNotifySocket {
 public:
  static absl::StatusOr<std::unique_ptr<UnreadNotifySocket>> Create() {
    auto socket = std::unique_ptr<UnreadNotifySocket>(new UnreadNotifySocket());
    char pattern[] = "/tmp/cld-notify-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
    socket->directory_ = pattern;
    socket->path_ = socket->directory_ + "/notify";
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, socket->path_.c_str(), socket->path_.size() + 1);
    const auto* named = reinterpret_cast<const sockaddr*>(&address);
    socket->fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (socket->fd_ < 0 || ::bind(socket->fd_, named, sizeof(address)) != 0) {
      return absl::InternalError(absl::StrCat("cannot bind ", socket->path_));
    }
    const int sender = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    constexpr char kFiller[] = "STATUS=filler";
    int sent = 0;
    while (sent < 100000 && ::sendto(sender, kFiller, sizeof(kFiller) - 1, MSG_DONTWAIT, named,
                                     sizeof(address)) >= 0) {
      ++sent;
    }
    const int error = errno;
    ::close(sender);
    if (error != EAGAIN && error != EWOULDBLOCK) {
      return absl::InternalError(
          absl::StrCat("filling ", socket->path_, ": ", std::strerror(error)));
    }
    return socket;
  }
  ~UnreadNotifySocket() {
    if (fd_ >= 0) ::close(fd_);
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  UnreadNotifySocket() = default;
  std::string directory_;
  std::string path_;
  int fd_ = -1;
};

enum class DaemonState { kIdle, kForming, kRunning, kEndedWithARankAttached };

std::string StateName(DaemonState state) {
  switch (state) {
    case DaemonState::kIdle:
      return "Idle";
    case DaemonState::kForming:
      return "Forming";
    case DaemonState::kRunning:
      return "Running";
    case DaemonState::kEndedWithARankAttached:
      return "EndedWithARankAttached";
  }
  return "Unknown";
}

bool RunningWithTwoAttached(const v1::StatusResponse& status) {
  return status.job().state() == v1::JOB_STATE_RUNNING && status.clients_size() == 2 &&
         status.clients(0).attached() && status.clients(1).attached();
}

class SigtermInAnyStateTest : public ::testing::TestWithParam<DaemonState> {};

// SIGTERM ends the daemon within the 10 s collectiverun gives it, whatever
// it is doing, and the daemon removes its socket and segments; here with a
// notification socket that nobody reads, which used to block it for ever.
TEST_P(SigtermInAnyStateTest, EndsTheDaemonPromptlyAndLeavesNothing) {
  auto notify = UnreadNotifySocket::Create();
  ASSERT_TRUE(notify.ok()) << notify.status();
  auto daemon = DaemonProcess::Start(
      {.flags = SmallMemoryFlags(), .environment = {{"NOTIFY_SOCKET", (*notify)->path()}}});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::vector<Subprocess> workers;
  const DaemonState state = GetParam();
  if (state == DaemonState::kForming) {
    auto early = (*daemon)->StartWorker(TestWorkerBinary(), 0, 2,
                                        {"connect-error", "--expect", "shutting down"});
    ASSERT_TRUE(early.ok()) << early.status();
    workers.push_back(std::move(*early));
    auto forming = (*daemon)->AwaitStatus(
        [](const v1::StatusResponse& s) { return s.job().registered() == 1; }, kStateTimeout);
    ASSERT_TRUE(forming.ok()) << forming.status();
  }
  if (state == DaemonState::kRunning || state == DaemonState::kEndedWithARankAttached) {
    auto started = (*daemon)->StartWorkers(TestWorkerBinary(), 2, {"leave-on-signal"});
    ASSERT_TRUE(started.ok()) << started.status();
    workers = std::move(*started);
    auto running = (*daemon)->AwaitStatus(RunningWithTwoAttached, kStateTimeout);
    ASSERT_TRUE(running.ok()) << running.status();
  }
  if (state == DaemonState::kEndedWithARankAttached) {
    workers[0].Signal(SIGUSR1);
    EXPECT_TRUE(ExitedCleanly(workers[0].Wait(kFailureBound))) << workers[0].Stderr();
    auto ending = (*daemon)->AwaitStatus(
        [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_ENDING; },
        kStateTimeout);
    ASSERT_TRUE(ending.ok()) << ending.status();
  }
  if (state != DaemonState::kIdle) {
    ASSERT_FALSE((*daemon)->Segments().empty());
  }

  (*daemon)->process().Signal(SIGTERM);
  const auto exited = (*daemon)->process().Wait(absl::Seconds(10));
  ASSERT_TRUE(exited.has_value()) << "collectived did not stop within 10 s of SIGTERM";
  EXPECT_TRUE(ExitedCleanly(exited)) << (*daemon)->process().Describe(*exited);
  EXPECT_FALSE(std::filesystem::exists((*daemon)->socket()));
  EXPECT_TRUE((*daemon)->Segments().empty());
  if (state == DaemonState::kForming) {
    const auto refused = workers[0].Wait(kFailureBound);
    EXPECT_TRUE(ExitedCleanly(refused)) << (refused ? workers[0].Describe(*refused) : "runs");
  }
}

INSTANTIATE_TEST_SUITE_P(States, SigtermInAnyStateTest,
                         ::testing::Values(DaemonState::kIdle, DaemonState::kForming,
                                           DaemonState::kRunning,
                                           DaemonState::kEndedWithARankAttached),
                         [](const auto& test_info) { return StateName(test_info.param); });

TEST(DeadDaemonTest, ClientsFailQuicklyAndASuccessorCleansUp) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string ended = "the session with collectived ended";
  auto victim = (*daemon)->StartWorker(TestWorkerBinary(), 1, 2, {"victim", "--expect", ended});
  ASSERT_TRUE(victim.ok()) << victim.status();
  auto waiter = (*daemon)->StartWorker(TestWorkerBinary(), 0, 2, {"wait-stuck", "--expect", ended});
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  auto blocked = (*daemon)->AwaitStatus(StuckJobBlocked, kStateTimeout);
  ASSERT_TRUE(blocked.ok()) << blocked.status();

  const double killed_at = MonotonicSeconds();
  (*daemon)->process().Signal(SIGKILL);
  ASSERT_TRUE((*daemon)->process().Wait(kFailureBound).has_value());
  std::vector<Subprocess> workers;
  workers.push_back(std::move(*waiter));
  workers.push_back(std::move(*victim));
  EXPECT_EQ(WaitForWorkers(workers, kFailureBound), "");
  ExpectFailedSoonAfter(killed_at, {&workers[0], &workers[1]});

  // What the dead daemon left: its socket, its lock file and the segments.
  EXPECT_TRUE(std::filesystem::exists((*daemon)->socket()));
  EXPECT_TRUE(std::filesystem::exists((*daemon)->socket() + ".lock"));
  EXPECT_FALSE((*daemon)->Segments().empty());
  auto successor =
      DaemonProcess::Start({.flags = SmallMemoryFlags(), .socket = (*daemon)->socket()});
  ASSERT_TRUE(successor.ok()) << successor.status();
  const std::vector<std::string> left = (*successor)->Segments();
  EXPECT_TRUE(left.empty()) << "left: " << absl::StrJoin(left, ", ");
  auto status = (*successor)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->pid(), (*successor)->process().pid());
  EXPECT_TRUE(ExitedCleanly((*successor)->Stop())) << (*successor)->process().Stderr();
  EXPECT_FALSE(std::filesystem::exists((*daemon)->socket()));
}

TEST(HungDaemonTest, ClientsNoticeTheMissingHeartbeat) {
  auto flags = SmallMemoryFlags();
  flags.insert(flags.end(), {"--heartbeat-interval-ms", "50"});
  auto daemon = DaemonProcess::Start({.flags = flags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  // The session stays open while the daemon is stopped: only the heartbeat
  // in shared memory tells the clients that it no longer works.
  const std::vector<std::string> options = {"--daemon-timeout-ms", "1000", "--expect",
                                            "collectived stopped responding: no heartbeat"};
  std::vector<std::string> victim_args = {"victim"};
  std::vector<std::string> waiter_args = {"wait-stuck"};
  victim_args.insert(victim_args.end(), options.begin(), options.end());
  waiter_args.insert(waiter_args.end(), options.begin(), options.end());
  auto victim = (*daemon)->StartWorker(TestWorkerBinary(), 1, 2, victim_args);
  ASSERT_TRUE(victim.ok()) << victim.status();
  auto waiter = (*daemon)->StartWorker(TestWorkerBinary(), 0, 2, waiter_args);
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  auto blocked = (*daemon)->AwaitStatus(StuckJobBlocked, kStateTimeout);
  ASSERT_TRUE(blocked.ok()) << blocked.status();

  const double stopped_at = MonotonicSeconds();
  (*daemon)->process().Signal(SIGSTOP);
  std::vector<Subprocess> workers;
  workers.push_back(std::move(*waiter));
  workers.push_back(std::move(*victim));
  const std::string failures = WaitForWorkers(workers, kFailureBound);
  ExpectFailedSoonAfter(stopped_at, {&workers[0], &workers[1]});
  (*daemon)->process().Signal(SIGCONT);
  // Once a client has concluded that its daemon hangs, closing it must not
  // wait on that daemon.
  EXPECT_EQ(failures, "") << "the clients detected the hung daemon but did not exit";
  EXPECT_EQ(WaitForWorkers(workers, kFailureBound), "");
  // Resumed, the daemon finds both sessions gone and cleans up.
  ExpectIdleAndClean(**daemon);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

TEST(SecondDaemonTest, RefusesASocketAlreadyServed) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto second = Subprocess::Start({CollectivedBinary(), "--socket", (*daemon)->socket()});
  ASSERT_TRUE(second.ok()) << second.status();
  const auto exited = second->Wait(kStateTimeout);
  ASSERT_TRUE(exited.has_value()) << "the second daemon still runs";
  EXPECT_TRUE(WIFEXITED(*exited) && WEXITSTATUS(*exited) != 0) << second->Describe(*exited);
  const std::string log = second->Stderr();
  EXPECT_NE(log.find(absl::StrCat("another collectived (pid ", (*daemon)->process().pid(),
                                  ") is already serving ", (*daemon)->socket())),
            std::string::npos)
      << log;
  // The first daemon keeps its socket and goes on serving.
  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->pid(), (*daemon)->process().pid());
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

TEST(BackToBackTest, DaemonServesANewJobAfterTheLastOneLeft) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  for (const char* job : {"first", "second"}) {
    auto workers =
        (*daemon)->StartWorkers(TestWorkerBinary(), 2, kMatrix, {{"COLLECTIVE_JOB_ID", job}});
    ASSERT_TRUE(workers.ok()) << workers.status();
    EXPECT_EQ(WaitForWorkers(*workers, kJobTimeout), "") << "job " << job;
    ExpectIdleAndClean(**daemon);
  }
  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().jobs(), 2u);
  EXPECT_EQ(status->totals().errors(), 0u);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

// mpirun forwards SIGUSR2 (and kills on SIGTERM): a daemon stops on it as
// on SIGTERM, cleanly.
TEST(StopSignalTest, Sigusr2StopsTheDaemonAsSigtermDoes) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string socket = (*daemon)->socket();
  (*daemon)->process().Signal(SIGUSR2);
  const std::optional<int> exited = (*daemon)->process().Wait(kStateTimeout);
  ASSERT_TRUE(exited.has_value()) << "SIGUSR2 did not stop the daemon";
  EXPECT_TRUE(ExitedCleanly(exited)) << (*daemon)->process().Describe(*exited);
  EXPECT_NE((*daemon)->process().Stderr().find("shutting down: received SIGUSR2"),
            std::string::npos)
      << (*daemon)->process().Stderr();
  EXPECT_FALSE(std::filesystem::exists(socket));
  EXPECT_FALSE(std::filesystem::exists(socket + ".lock"));
}

// A launcher says with SIGUSR1 that a node of the daemon's MPI world is
// lost: the daemon stops (without an MPI world, as on SIGTERM), cleanly,
// and says why.
TEST(StopSignalTest, Sigusr1StopsTheDaemonSayingThatTheWorldLostANode) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string socket = (*daemon)->socket();
  (*daemon)->process().Signal(SIGUSR1);
  const std::optional<int> exited = (*daemon)->process().Wait(kStateTimeout);
  ASSERT_TRUE(exited.has_value()) << "SIGUSR1 did not stop the daemon";
  EXPECT_TRUE(ExitedCleanly(exited)) << (*daemon)->process().Describe(*exited);
  EXPECT_NE((*daemon)->process().Stderr().find(
                "shutting down: received SIGUSR1: a node of the MPI world is lost"),
            std::string::npos)
      << (*daemon)->process().Stderr();
  EXPECT_FALSE(std::filesystem::exists(socket));
  EXPECT_FALSE(std::filesystem::exists(socket + ".lock"));
}

// Ranks started together with their daemon (collectiverun on other
// machines starts both at once): with COLLECTIVE_CONNECT_TIMEOUT_SECONDS a
// rank waits for the socket to accept connections; without it a rank
// fails at once, and past the timeout it says how long it waited.
TEST(ConnectTimeoutTest, RanksStartedBeforeTheirDaemonWaitForIt) {
  TemporaryDirectory directory("connect");
  const std::string socket = directory.path() + "/collectived.sock";
  std::vector<Subprocess> workers;
  for (int rank = 0; rank < 2; ++rank) {
    auto worker = Subprocess::Start({TestWorkerBinary(), "matrix", "--big-bytes", "4096"},
                                    {{"COLLECTIVE_SOCKET", socket},
                                     {"LOCAL_RANK", std::to_string(rank)},
                                     {"LOCAL_SIZE", "2"},
                                     {"COLLECTIVE_CONNECT_TIMEOUT_SECONDS", "60"}});
    ASSERT_TRUE(worker.ok()) << worker.status();
    workers.push_back(std::move(*worker));
  }
  // Without the timeout they would have failed by now (the next test).
  EXPECT_FALSE(workers[0].Wait(absl::Milliseconds(300)).has_value()) << workers[0].Stdout();
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags(), .socket = socket});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_EQ(WaitForWorkers(workers, kJobTimeout), "");
  ExpectIdleAndClean(**daemon);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

// A rank run against `socket` with `timeout` (unset when empty) in its
// environment fails its registration with an error containing `expect`.
void ExpectConnectError(const std::string& socket, const std::string& timeout,
                        const std::string& expect) {
  std::map<std::string, std::string> environment = {{"COLLECTIVE_SOCKET", socket}};
  if (!timeout.empty()) environment["COLLECTIVE_CONNECT_TIMEOUT_SECONDS"] = timeout;
  auto worker =
      Subprocess::Start({TestWorkerBinary(), "connect-error", "--expect", expect}, environment);
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::optional<int> exited = worker->Wait(kStateTimeout);
  ASSERT_TRUE(exited.has_value()) << "timeout " << timeout;
  EXPECT_TRUE(ExitedCleanly(exited)) << worker->Describe(*exited) << worker->Stdout();
}

TEST(ConnectTimeoutTest, WithoutADaemonARankFailsAtOnceOrAfterItsTimeout) {
  TemporaryDirectory directory("connect");
  const std::string socket = directory.path() + "/collectived.sock";
  const absl::Time started = absl::Now();
  ExpectConnectError(socket, "", "cannot reach collectived at " + socket);
  EXPECT_LT(absl::Now() - started, absl::Seconds(5));
  ExpectConnectError(socket, "1",
                     "UNAVAILABLE: collectived did not accept connections on " + socket +
                         " within 1s (COLLECTIVE_CONNECT_TIMEOUT_SECONDS)");
  ExpectConnectError(socket, "soon",
                     "environment variable COLLECTIVE_CONNECT_TIMEOUT_SECONDS='soon' is not a "
                     "number of seconds from 0 to 86400");
}

}  // namespace
}  // namespace collective::testing
