// One daemon, several jobs at once: real client processes of two and three
// concurrent jobs (different rank counts, every kind of collective) each get
// their reference results; a rank killed in one job fails that job only,
// while the other job's ranks finish; another uid's process cannot open a
// job's segments, and as a client of a job of its own reaches nothing of
// another job (its memory, its results, its names); and status lists every
// job (`--job` narrows it).
#include <csignal>
#include <map>
#include <optional>
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
#include "absl/strings/str_join.h"
#include "tests/integration/collectives_job.h"
#include "tests/integration/raw_client.h"

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

// A client of uid 65534 in a job of its own (collective-hostile-worker)
// reaches for root's job while that job reduces under the same names: the
// other job's segments, inputs and outputs outside its own arena (where the
// daemon's mappings of the other job's memory could lie), releases of the
// other job's request ids, and the other job's tensor names. Every request
// that reaches outside is refused with a message that says why; the names
// combine its own data only; and root's job gets its exact results before,
// throughout and after.
TEST(SeveralJobsTest, AHostileClientOfAnotherUidReachesNothingOfAnotherJob) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another uid";
  // The hostile client reaches the socket through its group, 4242, which is
  // neither root's job's uid nor its gid.
  std::vector<std::string> flags = kFlags;
  flags.insert(flags.end(), {"--socket-group", "4242"});
  auto daemon = DaemonProcess::Start({.flags = flags, .directory_mode = 0755});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto joined = RawClient::JoinJob((*daemon)->socket(), 2, 1 << 20, "victim");
  ASSERT_TRUE(joined.ok()) << joined.status();
  const std::vector<RawClient*> victim = {(*joined)[0].get(), (*joined)[1].get()};
  const std::vector<std::string> names = {"grad.0", "grad.1"};
  uint64_t id = 1;
  for (const std::string& name : names) ASSERT_EQ(CheckAllreduce(victim, id++, name), "");

  const std::vector<std::string> segments = (*daemon)->Segments();
  ASSERT_FALSE(segments.empty());
  auto hostile = (*daemon)->StartWorker(
      BuiltBinary(HOSTILE_WORKER_BINARY), 0, 1,
      {"--uid", "65534", "--groups", "4242", "--segments", absl::StrJoin(segments, ","),
       "--release-ids", "1,4096", "--names", absl::StrJoin(names, ",")},
      {{"COLLECTIVE_JOB_ID", "hostile"}});
  ASSERT_TRUE(hostile.ok()) << hostile.status();
  // Root's job reduces under the same names until the hostile client is
  // done, holding a result the hostile client's releases name each time.
  const absl::Time deadline = absl::Now() + kTimeout;
  std::optional<int> exited;
  int rounds = 0;
  while (!(exited = hostile->Wait(absl::ZeroDuration())).has_value()) {
    ASSERT_LT(absl::Now(), deadline) << "the hostile client did not finish";
    ASSERT_EQ(CheckAllreduce(victim, id++, names[rounds % names.size()]), "")
        << "root's job, round " << rounds;
    ++rounds;
  }
  ASSERT_TRUE(ExitedCleanly(exited)) << hostile->Describe(*exited);
  for (const std::string& name : names) ASSERT_EQ(CheckAllreduce(victim, id++, name), "");

  const std::string said = hostile->Stdout();
  for (const std::string& segment : segments) {
    EXPECT_TRUE(absl::StrContains(said, absl::StrCat("open ", segment, ": Permission denied")))
        << said;
  }
  // Both jobs' clients asked for the same arena.
  const uint64_t arena = victim[0]->segment().arena_bytes();
  for (const std::string& refusal :
       {absl::StrCat("input past the arena: INVALID_ARGUMENT: request 4294967296 ('grad.0'): "
                     "offset ",
                     arena, " + length 16 lies outside the client's arena of ", arena, " bytes"),
        absl::StrCat("input far past the arena: INVALID_ARGUMENT: request 4294967297 ('grad.0'): "
                     "offset 1099511627776 + length 16 lies outside the client's arena of ",
                     arena, " bytes"),
        absl::StrCat("input wrapping around: INVALID_ARGUMENT: request 4294967298 ('grad.0'): "
                     "offset 18446744073709551608 + length 16 lies outside the client's arena of ",
                     arena, " bytes"),
        absl::StrCat("input longer than the arena: INVALID_ARGUMENT: request 4294967299 "
                     "('grad.0'): offset 0 + length ",
                     arena + 4, " lies outside the client's arena of ", arena, " bytes"),
        absl::StrCat("output past the arena: INVALID_ARGUMENT: request 4294967300 ('grad.0'): "
                     "output_offset ",
                     arena - 8, " + length 16 lies outside the client's arena of ", arena,
                     " bytes (the daemon writes a result only into the client's own arena)"),
        absl::StrCat("output far past the arena: INVALID_ARGUMENT: request 4294967301 "
                     "('grad.0'): output_offset 1099511627776 + length 16 lies outside the "
                     "client's arena of ",
                     arena, " bytes (the daemon writes a result only into the client's own arena)"),
        std::string("released the other job's request ids 1 to 4096"),
        std::string("grad.0: its own result"), std::string("grad.1: its own result")}) {
    EXPECT_TRUE(absl::StrContains(said, refusal + "\n")) << "missing: " << refusal << "\n" << said;
  }
  EXPECT_GT(rounds, 0) << "root's job ran no collective while the hostile client did";

  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().jobs(), 2u);
  for (RawClient* client : victim) EXPECT_TRUE(client->Leave().ok());
  EXPECT_EQ(StopAndCheck(**daemon), "");
}

}  // namespace
}  // namespace collective::testing
