// One daemon, several jobs at once: real client processes of two and three
// concurrent jobs (different rank counts, every kind of collective) each get
// their reference results; a rank killed in one job fails that job only,
// while the other job's ranks finish; another uid's process cannot open a
// job's segments, and as a client of a job of its own reaches nothing of
// another job (its memory, its results, its names); status lists every job
// (`--job` narrows it); the metrics carry a series per job, which goes when
// its job ends; and a job's own timeline (collectivectl timeline start
// --job, or the job's HOROVOD_TIMELINE) records that job alone.
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
#include "tests/common/temporary_directory.h"
#include "tests/common/trace_reader.h"
#include "tests/integration/collectives_job.h"
#include "tests/integration/metrics_scrape.h"
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

// Two jobs of looping allreduces, named after the job ("first.0", ...):
// 'first' of 2 ranks and 'second' of 1, both running.
struct TwoJobs {
  std::vector<Subprocess> first;
  std::vector<Subprocess> second;
  v1::StatusResponse status;  // with both running
};
absl::StatusOr<TwoJobs> StartTwoJobs(
    DaemonProcess& daemon, const std::map<std::string, std::string>& second_environment = {}) {
  TwoJobs jobs;
  auto first = daemon.StartWorkers(CollectivesWorkerBinary(), 2, {"loop", "--name", "first"},
                                   {{"COLLECTIVE_JOB_ID", "first"}});
  if (!first.ok()) return first.status();
  jobs.first = std::move(*first);
  std::map<std::string, std::string> environment = second_environment;
  environment["COLLECTIVE_JOB_ID"] = "second";
  auto second =
      daemon.StartWorkers(CollectivesWorkerBinary(), 1, {"loop", "--name", "second"}, environment);
  if (!second.ok()) return second.status();
  jobs.second = std::move(*second);
  auto status = daemon.AwaitStatus(BothRunning, kTimeout);
  if (!status.ok()) return status.status();
  jobs.status = *std::move(status);
  return jobs;
}

TEST(SeveralJobsTest, StatusListsEveryJobAndAnotherUidCannotOpenAJobsSegments) {
  auto daemon = DaemonProcess::Start({.flags = kFlags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto jobs = StartTwoJobs(**daemon);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  const v1::StatusResponse* status = &jobs->status;
  std::vector<Subprocess>* first = &jobs->first;
  std::vector<Subprocess>* second = &jobs->second;
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

// The report of job `id` in `status`, or null.
const v1::JobReport* JobNamed(const v1::StatusResponse& status, const std::string& id) {
  for (const v1::JobReport& job : status.jobs()) {
    if (job.job().id() == id) return &job;
  }
  return nullptr;
}

// The daemon's metrics as Prometheus scrapes them, over HTTP.
std::map<std::string, double> Scrape(DaemonProcess& daemon) {
  auto status = daemon.Status();
  EXPECT_TRUE(status.ok()) << status.status();
  if (!status.ok()) return {};
  auto reply = HttpGet(status->metrics_url(), "/metrics");
  EXPECT_TRUE(reply.ok()) << reply.status();
  if (!reply.ok()) return {};
  auto samples = ParseSamples(reply->body);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *std::move(samples) : std::map<std::string, double>{};
}

// The series that name `job_id`.
std::vector<std::string> SeriesOf(const std::map<std::string, double>& samples,
                                  const std::string& job_id) {
  std::vector<std::string> series;
  for (const auto& [name, value] : samples) {
    if (absl::StrContains(name, absl::StrCat("job_id=\"", job_id, "\""))) series.push_back(name);
  }
  return series;
}

void KillAll(std::vector<Subprocess>& workers) {
  for (Subprocess& worker : workers) worker.Signal(SIGKILL);
  for (Subprocess& worker : workers) worker.Wait(kTimeout);
}

TEST(SeveralJobsTest, EachJobHasItsOwnMetricsSeriesUntilItEnds) {
  std::vector<std::string> flags = kFlags;
  flags.insert(flags.end(), {"--metrics-listen", "127.0.0.1:0"});
  auto daemon = DaemonProcess::Start({.flags = flags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto jobs = StartTwoJobs(**daemon);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_NO_FATAL_FAILURE(AwaitSaid(jobs->first, "running", kTimeout));
  ASSERT_NO_FATAL_FAILURE(AwaitSaid(jobs->second, "running", kTimeout));

  const std::map<std::string, double> both = Scrape(**daemon);
  EXPECT_EQ(both.at("collectived_job_local_ranks{job_id=\"first\"}"), 2);
  EXPECT_EQ(both.at("collectived_job_local_ranks{job_id=\"second\"}"), 1);
  EXPECT_EQ(both.at("collectived_job_status{job_id=\"first\",state=\"running\"}"), 1);
  EXPECT_EQ(both.at("collectived_job_status{job_id=\"second\",state=\"running\"}"), 1);
  EXPECT_GT(both.at("collectived_job_collectives_total{job_id=\"first\"}"), 10);
  EXPECT_GT(both.at("collectived_job_bytes_reduced_total{job_id=\"second\"}"), 0);
  EXPECT_EQ(both.at("collectived_clients_connected"), 3);  // the daemon's, over both

  // The first job ends: its series go, the other job's and the daemon's stay.
  KillAll(jobs->first);
  ASSERT_TRUE(
      (*daemon)
          ->AwaitStatus([](const v1::StatusResponse& s) { return s.jobs_size() == 1; }, kTimeout)
          .ok());
  const std::map<std::string, double> one = Scrape(**daemon);
  EXPECT_TRUE(SeriesOf(one, "first").empty()) << absl::StrJoin(SeriesOf(one, "first"), "\n");
  EXPECT_FALSE(SeriesOf(one, "second").empty());
  EXPECT_EQ(one.at("collectived_jobs_started_total"), 2);
  EXPECT_EQ(one.at("collectived_jobs_ended_total{outcome=\"failed\"}"), 1);
  EXPECT_GE(one.at("collectived_collectives_total{collective=\"allreduce\",dtype=\"float32\"}"),
            both.at("collectived_collectives_total{collective=\"allreduce\",dtype=\"float32\"}"));

  KillAll(jobs->second);
  ExpectCleanStop(**daemon);
}

// The tensor names (trace processes) of a timeline file, which must be
// complete.
std::vector<std::string> TensorsIn(const std::string& path) {
  auto events = ReadTrace(path);
  EXPECT_TRUE(events.ok()) << path << ": " << events.status();
  std::vector<std::string> names;
  if (events.ok()) {
    for (const auto& [name, pid] : TraceProcesses(*events)) names.push_back(name);
  }
  return names;
}

TEST(SeveralJobsTest, AJobsOwnTimelineRecordsThatJobAlone) {
  TemporaryDirectory directory("jobtl");
  ASSERT_FALSE(directory.path().empty());
  const std::string first_file = directory.path() + "/first.json";
  const std::string second_file = directory.path() + "/second.json";
  auto daemon = DaemonProcess::Start({.flags = kFlags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  // The second job asks for its timeline as Horovod's jobs do.
  auto jobs = StartTwoJobs(**daemon, {{"HOROVOD_TIMELINE", second_file}});
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  const v1::StatusResponse* status = &jobs->status;
  ASSERT_NE(JobNamed(*status, "first"), nullptr);
  ASSERT_NE(JobNamed(*status, "second"), nullptr);
  EXPECT_FALSE(JobNamed(*status, "first")->timeline().active());
  EXPECT_TRUE(JobNamed(*status, "second")->timeline().active());
  EXPECT_EQ(JobNamed(*status, "second")->timeline().path(), second_file);
  EXPECT_FALSE(status->timeline().active());  // the daemon's

  // collectivectl names the job; one the daemon does not serve is refused.
  const CommandResult unknown =
      RunCollectivectl((*daemon)->socket(), {"timeline", "start", "--job", "third", first_file});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(unknown.err, "no job 'third'")) << unknown.err;
  const CommandResult started =
      RunCollectivectl((*daemon)->socket(), {"timeline", "start", "--job", "first", first_file});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  EXPECT_TRUE(absl::StrContains(started.out, "timeline of job 'first' recording to " + first_file))
      << started.out;
  // Two timelines never write one file.
  const CommandResult taken =
      RunCollectivectl((*daemon)->socket(), {"timeline", "start", second_file});
  EXPECT_EQ(taken.exit_code, 1) << taken.out;
  EXPECT_TRUE(absl::StrContains(taken.err, "the timeline of job 'second' already records to"))
      << taken.err;
  ASSERT_TRUE((*daemon)
                  ->AwaitStatus(
                      [](const v1::StatusResponse& s) {
                        const v1::JobReport* job = JobNamed(s, "first");
                        return job != nullptr && job->timeline().events_written() > 20;
                      },
                      kTimeout)
                  .ok());
  const CommandResult stopped =
      RunCollectivectl((*daemon)->socket(), {"timeline", "stop", "--job", "first"});
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_TRUE(absl::StrContains(stopped.out, "timeline of job 'first' stopped")) << stopped.out;
  const std::vector<std::string> first_tensors = TensorsIn(first_file);
  EXPECT_FALSE(first_tensors.empty());
  for (const std::string& name : first_tensors) {
    EXPECT_TRUE(absl::StartsWith(name, "first.")) << name << " in the first job's timeline";
  }

  // The second job's timeline ends with the job, its file complete.
  KillAll(jobs->first);
  KillAll(jobs->second);
  ASSERT_TRUE(
      (*daemon)
          ->AwaitStatus([](const v1::StatusResponse& s) { return s.jobs_size() == 0; }, kTimeout)
          .ok());
  const std::vector<std::string> second_tensors = TensorsIn(second_file);
  EXPECT_FALSE(second_tensors.empty());
  for (const std::string& name : second_tensors) {
    EXPECT_TRUE(absl::StartsWith(name, "second.")) << name << " in the second job's timeline";
  }
  ExpectCleanStop(**daemon);
}

}  // namespace
}  // namespace collective::testing
