// One daemon, several jobs at once: real client processes of two and three
// concurrent jobs (different rank counts, every kind of collective) each get
// their reference results; a rank killed in one job fails that job only,
// while the other job's ranks finish; another uid's process cannot open a
// job's segments; and status lists every job (`--job` narrows it).
#include <csignal>
#include <map>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/collectives_job.h"

namespace collective::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(120);

const std::vector<std::string> kFlags = {"--fusion-threshold-bytes", "65536",
                                         "--default-arena-bytes",    "16MiB",
                                         "--result-arena-bytes",     "64MiB"};

struct JobSpec {
  std::string id;
  int ranks;
  std::vector<std::string> scenario;
};

// Starts every job's ranks at once on `daemon`, then waits for them all.
void RunConcurrently(DaemonProcess& daemon, const std::vector<JobSpec>& jobs) {
  std::vector<std::vector<Subprocess>> workers;
  for (const JobSpec& job : jobs) {
    auto started = daemon.StartWorkers(CollectivesWorkerBinary(), job.ranks, job.scenario,
                                       {{"COLLECTIVE_JOB_ID", job.id}});
    ASSERT_TRUE(started.ok()) << started.status();
    workers.push_back(std::move(*started));
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    EXPECT_EQ(WaitForWorkers(workers[j], kTimeout), "") << "job '" << jobs[j].id << "'";
  }
  auto status = daemon.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().errors(), 0u);
  EXPECT_GT(status->totals().collectives(), 0u);
  EXPECT_EQ(status->totals().jobs(), jobs.size());
}

TEST(SeveralJobsTest, TwoJobsAtOnceEachGetTheirReferenceResults) {
  auto daemon = DaemonProcess::Start({.flags = kFlags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  RunConcurrently(**daemon, {{"mixed", 2, {"mixed"}},
                             {"rooted", 3, {"rooted-matrix", "--big-bytes", "65536"}}});
  ExpectCleanStop(**daemon);
}

TEST(SeveralJobsTest, ThreeJobsAtOnceEachGetTheirReferenceResults) {
  auto daemon = DaemonProcess::Start({.flags = kFlags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  RunConcurrently(**daemon, {{"grouped", 1, {"grouped"}},
                             {"alltoall", 2, {"alltoall-matrix", "--big-bytes", "65536"}},
                             {"ring", 3, {"p2p-ring"}}});
  ExpectCleanStop(**daemon);
}

TEST(SeveralJobsTest, AKilledRankFailsItsJobOnlyWhileTheOtherFinishes) {
  auto daemon = DaemonProcess::Start({.flags = kFlags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto doomed = (*daemon)->StartWorkers(CollectivesWorkerBinary(), 2, {"loop"},
                                        {{"COLLECTIVE_JOB_ID", "doomed"}});
  ASSERT_TRUE(doomed.ok()) << doomed.status();
  auto survivor =
      (*daemon)->StartWorkers(CollectivesWorkerBinary(), 2, {"repeat", "--steps", "200"},
                              {{"COLLECTIVE_JOB_ID", "survivor"}});
  ASSERT_TRUE(survivor.ok()) << survivor.status();
  ASSERT_NO_FATAL_FAILURE(AwaitSaid(*doomed, "running", kTimeout));
  (*doomed)[1].Signal(SIGKILL);
  const auto exited = (*doomed)[0].Wait(kTimeout);
  ASSERT_TRUE(ExitedCleanly(exited)) << (*doomed)[0].Stderr();
  EXPECT_TRUE(absl::StrContains((*doomed)[0].Stdout(), "job 'doomed'")) << (*doomed)[0].Stdout();
  EXPECT_EQ(WaitForWorkers(*survivor, kTimeout), "") << "the other job was harmed";
  auto status = (*daemon)->AwaitStatus(
      [](const v1::StatusResponse& s) { return s.jobs_size() == 0; }, kTimeout);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().jobs(), 2u);
  ExpectCleanStop(**daemon);
}

// Blocks until the daemon's status shows both jobs running.
bool BothRunning(const v1::StatusResponse& status) {
  int running = 0;
  for (const v1::JobReport& job : status.jobs()) {
    running += job.job().state() == v1::JOB_STATE_RUNNING ? 1 : 0;
  }
  return running == 2;
}

TEST(SeveralJobsTest, StatusListsEveryJobAndAnotherUidCannotOpenAJobsSegments) {
  auto daemon = DaemonProcess::Start({.flags = kFlags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto first = (*daemon)->StartWorkers(CollectivesWorkerBinary(), 2, {"loop"},
                                       {{"COLLECTIVE_JOB_ID", "first"}});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = (*daemon)->StartWorkers(CollectivesWorkerBinary(), 1, {"loop"},
                                        {{"COLLECTIVE_JOB_ID", "second"}});
  ASSERT_TRUE(second.ok()) << second.status();
  auto status = (*daemon)->AwaitStatus(BothRunning, kTimeout);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->jobs_size(), 2);
  EXPECT_EQ(status->jobs(0).job().id(), "first");
  EXPECT_EQ(status->jobs(0).clients_size(), 2);
  EXPECT_EQ(status->jobs(1).job().id(), "second");
  EXPECT_EQ(status->jobs(1).clients_size(), 1);
  for (const v1::JobReport& job : status->jobs()) {
    ASSERT_EQ(job.job().owner_uids_size(), 1);
    EXPECT_EQ(job.job().owner_uids(0), ::geteuid());
  }

  // collectivectl lists both, and --job narrows it to one.
  const CommandResult listed = RunCollectivectl((*daemon)->socket(), {"status"});
  EXPECT_TRUE(absl::StrContains(listed.out, "JOBS")) << listed.out << listed.err;
  EXPECT_TRUE(absl::StrContains(listed.out, "job 'first': running")) << listed.out;
  EXPECT_TRUE(absl::StrContains(listed.out, "job 'second': running")) << listed.out;
  const CommandResult narrowed =
      RunCollectivectl((*daemon)->socket(), {"status", "--job", "second"});
  EXPECT_FALSE(absl::StrContains(narrowed.out, "job 'first'")) << narrowed.out;
  EXPECT_TRUE(absl::StrContains(narrowed.out, "job 'second': running")) << narrowed.out;

  // Another uid cannot open any of the jobs' segments, whatever it asks for.
  if (::geteuid() == 0) {
    const std::vector<std::string> segments = (*daemon)->Segments();
    ASSERT_FALSE(segments.empty());
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
      for (const std::string& name : segments) {
        const int fd = ::shm_open(("/" + name).c_str(), O_RDONLY, 0);
        if (fd >= 0) ::_exit(1);  // it could read another uid's job
      }
      ::_exit(0);
    }
    int wait_status = 0;
    ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
    ASSERT_TRUE(WIFEXITED(wait_status));
    EXPECT_EQ(WEXITSTATUS(wait_status), 0) << "uid 65534 opened a segment of root's jobs";
  }

  for (Subprocess& worker : *first) worker.Signal(SIGKILL);
  for (Subprocess& worker : *second) worker.Signal(SIGKILL);
  for (Subprocess& worker : *first) worker.Wait(kTimeout);
  for (Subprocess& worker : *second) worker.Wait(kTimeout);
  ExpectCleanStop(**daemon);
}

}  // namespace
}  // namespace collective::testing
