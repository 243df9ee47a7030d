// Chaos and soak: many rounds of kill -9 of a random rank of a running job at
// a random moment, and of the daemon itself under a running job followed by
// a successor on the same socket (or a daemon on another); and jobs of
// ResNet-50 gradient steps with the daemon's resident memory and descriptors
// sampled from /proc. Every round is checked for what the failure tests
// check once (the error reaches every survivor in time and names the dead
// rank, nothing is left in /dev/shm, the daemon serves the next job); the
// soak checks that nothing grows from one job to the next. Bounded so that
// the suite stays quick; COLLECTIVE_CHAOS_ROUNDS, COLLECTIVE_SOAK_JOBS and
// COLLECTIVE_SOAK_STEPS run them longer, and COLLECTIVE_CHAOS_SEED replays
// the random choices of a failed run (each test prints its seed). Each test
// prints its figures (rounds, time to error, memory and descriptors) for the
// record.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <signal.h>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "tests/integration/collectives_job.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

// How long the survivors of a kill may take to hear of it (issue 15's
// bound; the heartbeat and the session stream each notice much sooner).
constexpr absl::Duration kErrorBound = absl::Seconds(5);
constexpr absl::Duration kStartTimeout = absl::Seconds(60);
constexpr absl::Duration kStateTimeout = absl::Seconds(10);

// A positive integer from the environment, or `fallback`.
int64_t FromEnvironment(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  int64_t value = 0;
  return text != nullptr && absl::SimpleAtoi(text, &value) && value > 0 ? value : fallback;
}

// The random source of a test, seeded from COLLECTIVE_CHAOS_SEED or at
// random; the seed is printed so that a failure can be replayed.
std::mt19937_64 SeededRandom(const std::string& test) {
  const uint64_t seed =
      static_cast<uint64_t>(FromEnvironment("COLLECTIVE_CHAOS_SEED", std::random_device{}()));
  std::cout << test << ": seed " << seed << " (COLLECTIVE_CHAOS_SEED=" << seed << " replays it)"
            << std::endl;
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return std::mt19937_64(seed);
}

int Uniform(std::mt19937_64& random, int low, int high) {
  return std::uniform_int_distribution<int>(low, high)(random);
}

// Waits until the daemon has completed `extra` more collectives than when
// called: a moment chosen by the number of steps the job has run, not by the
// clock.
void AwaitCollectives(const DaemonProcess& daemon, uint64_t extra) {
  auto now = daemon.Status();
  ASSERT_TRUE(now.ok()) << now.status();
  const uint64_t target = now->totals().collectives() + extra;
  auto reached = daemon.AwaitStatus(
      [&](const v1::StatusResponse& s) { return s.totals().collectives() >= target; },
      kStateTimeout);
  ASSERT_TRUE(reached.ok()) << reached.status();
}

// Waits for each of `workers` until `killed` + kErrorBound; each must exit 0
// (the loop scenario exits 0 once a collective failed) having printed its
// error, which contains `expect`. Returns the longest time from the kill to
// a survivor's exit (which bounds the time to its error from above).
absl::Duration ExpectErrorsInTime(std::vector<Subprocess*> workers, absl::Time killed,
                                  const std::string& expect) {
  absl::Duration slowest = absl::ZeroDuration();
  for (Subprocess* worker : workers) {
    const std::optional<int> exit =
        worker->Wait(std::max(killed + kErrorBound - absl::Now(), absl::ZeroDuration()));
    slowest = std::max(slowest, absl::Now() - killed);
    EXPECT_TRUE(exit.has_value()) << "pid " << worker->pid() << " got no error within "
                                  << kErrorBound << "; its stdout:\n"
                                  << worker->Stdout();
    if (!exit.has_value()) continue;
    EXPECT_TRUE(ExitedCleanly(exit)) << worker->Describe(*exit);
    const std::string said = worker->Stdout();
    EXPECT_TRUE(absl::StrContains(said, "error after ")) << said;
    EXPECT_TRUE(absl::StrContains(said, expect)) << "expected '" << expect << "' in:\n" << said;
  }
  return slowest;
}

// Starts `size` ranks of the allreduce loop and waits until every one runs.
void StartLoop(const DaemonProcess& daemon, int size, std::vector<Subprocess>& workers) {
  // Small tensors: the small arenas of SmallMemoryFlags hold them.
  auto started =
      daemon.StartWorkers(CollectivesWorkerBinary(), size, {"loop", "--elements", "16384"});
  ASSERT_TRUE(started.ok()) << started.status();
  workers = std::move(*started);
  AwaitSaid(workers, "running\n", kStartTimeout);
}

// A short job that must complete: the daemon still serves.
void ExpectServesAJob(const DaemonProcess& daemon) {
  auto workers = daemon.StartWorkers(CollectivesWorkerBinary(), 2,
                                     {"repeat", "--steps", "3", "--tensors", "4"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, kStartTimeout), "");
}

void ExpectNoSegments(const std::string& socket) {
  const std::vector<std::string> left = SegmentsOf(socket);
  EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << absl::StrJoin(left, ", ");
}

TEST(ChaosTest, RankKilledAtARandomMomentFailsEverySurvivorInTime) {
  std::mt19937_64 random = SeededRandom("RankKilledAtARandomMoment");
  const int rounds = static_cast<int>(FromEnvironment("COLLECTIVE_CHAOS_ROUNDS", 20));
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  absl::Duration slowest = absl::ZeroDuration();
  for (int round = 0; round < rounds; ++round) {
    const int size = Uniform(random, 2, 4);
    const int victim = Uniform(random, 0, size - 1);
    const int steps = Uniform(random, 0, 40);
    SCOPED_TRACE(absl::StrCat("round ", round, ": rank ", victim, " of ", size, " killed after ",
                              steps, " more steps"));
    std::vector<Subprocess> workers;
    ASSERT_NO_FATAL_FAILURE(StartLoop(**daemon, size, workers));
    ASSERT_NO_FATAL_FAILURE(AwaitCollectives(**daemon, static_cast<uint64_t>(steps)));

    const absl::Time killed = absl::Now();
    workers[victim].Signal(SIGKILL);
    std::vector<Subprocess*> survivors;
    for (int rank = 0; rank < size; ++rank) {
      if (rank != victim) survivors.push_back(&workers[rank]);
    }
    const absl::Duration took = ExpectErrorsInTime(
        survivors, killed,
        absl::StrCat("rank ", victim, " (pid ", workers[victim].pid(), ") disconnected"));
    slowest = std::max(slowest, took);
    std::cout << "round " << round << ": killed rank " << victim << " of " << size << " after "
              << steps << " more steps; every survivor had exited " << took << " later"
              << std::endl;
    ASSERT_TRUE(workers[victim].Wait(kErrorBound).has_value());

    // The failed job is gone with its segments; the next round is the
    // daemon's next job.
    auto idle = (*daemon)->AwaitStatus(
        [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; },
        kStateTimeout);
    ASSERT_TRUE(idle.ok()) << idle.status();
    ExpectNoSegments((*daemon)->socket());
    if (HasFailure()) break;
  }
  ExpectServesAJob(**daemon);
  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().jobs(), static_cast<uint64_t>(rounds) + 1);
  std::cout << "rank kills: " << rounds << " rounds; slowest survivor exited " << slowest
            << " after its kill (bound " << kErrorBound << ")" << std::endl;
  ExpectCleanStop(**daemon);
}

TEST(ChaosTest, DaemonKilledAtARandomMomentAndItsSuccessorCleansUp) {
  std::mt19937_64 random = SeededRandom("DaemonKilledAtARandomMoment");
  const int rounds =
      static_cast<int>(std::max<int64_t>(2, FromEnvironment("COLLECTIVE_CHAOS_ROUNDS", 20) / 4));
  // The first daemon owns the socket's directory; each successor takes the
  // same socket over from its killed predecessor.
  auto first = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string socket = (*first)->socket();
  DaemonProcess* current = first->get();
  std::unique_ptr<DaemonProcess> successor;
  absl::Duration slowest = absl::ZeroDuration();
  for (int round = 0; round < rounds; ++round) {
    const int size = Uniform(random, 2, 4);
    const int steps = Uniform(random, 0, 40);
    SCOPED_TRACE(absl::StrCat("round ", round, ": daemon killed under ", size, " ranks after ",
                              steps, " more steps"));
    std::vector<Subprocess> workers;
    ASSERT_NO_FATAL_FAILURE(StartLoop(*current, size, workers));
    ASSERT_NO_FATAL_FAILURE(AwaitCollectives(*current, static_cast<uint64_t>(steps)));

    const absl::Time killed = absl::Now();
    current->process().Signal(SIGKILL);
    ASSERT_TRUE(current->process().Wait(kErrorBound).has_value());
    std::vector<Subprocess*> trainers;
    for (Subprocess& worker : workers) trainers.push_back(&worker);
    const absl::Duration took = ExpectErrorsInTime(trainers, killed, "collectived");
    slowest = std::max(slowest, took);
    std::cout << "round " << round << ": killed the daemon under " << size << " ranks after "
              << steps << " more steps; every rank had exited " << took << " later" << std::endl;

    // What the dead daemon left: its socket, its lock file and the job's
    // segments; its successor on the same socket removes them.
    EXPECT_TRUE(std::filesystem::exists(socket));
    EXPECT_TRUE(std::filesystem::exists(socket + ".lock"));
    EXPECT_FALSE(SegmentsOf(socket).empty());
    auto next = DaemonProcess::Start({.flags = SmallMemoryFlags(), .socket = socket});
    ASSERT_TRUE(next.ok()) << next.status();
    successor = std::move(*next);
    current = successor.get();
    ExpectNoSegments(socket);
    auto status = current->Status();
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(status->pid(), current->process().pid());
    if (HasFailure()) break;
  }
  ExpectServesAJob(*current);
  std::cout << "daemon kills: " << rounds << " rounds; slowest rank exited " << slowest
            << " after the kill (bound " << kErrorBound << ")" << std::endl;
  ExpectCleanStop(*current);
  EXPECT_FALSE(std::filesystem::exists(socket));
  EXPECT_FALSE(std::filesystem::exists(socket + ".lock"));
}

// A daemon whose socket nobody serves again (collectiverun's private daemon,
// killed with collectiverun) leaves its segments to any later daemon of the
// uid: the kernel dropped the lock on its liveness mark when it died.
TEST(ChaosTest, ADaemonOnAnotherSocketRemovesWhatAKilledOneLeft) {
  auto killed_daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(killed_daemon.ok()) << killed_daemon.status();
  const std::string socket = (*killed_daemon)->socket();
  std::vector<Subprocess> workers;
  ASSERT_NO_FATAL_FAILURE(StartLoop(**killed_daemon, 2, workers));
  ASSERT_NO_FATAL_FAILURE(AwaitCollectives(**killed_daemon, 3));
  auto other = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(SegmentsOf(socket).empty()) << "a running daemon's segments stay";

  const absl::Time killed = absl::Now();
  (*killed_daemon)->process().Signal(SIGKILL);
  ASSERT_TRUE((*killed_daemon)->process().Wait(kErrorBound).has_value());
  ExpectErrorsInTime({&workers[0], &workers[1]}, killed, "collectived");
  EXPECT_FALSE(SegmentsOf(socket).empty()) << "a killed daemon cannot remove its segments";

  auto next = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_NE((*next)->socket(), socket);
  ExpectNoSegments(socket);
  ExpectServesAJob(**other);
  ExpectCleanStop(**other);
}

// The daemon's footprint at one moment.
struct Footprint {
  int64_t resident_kib = 0;
  size_t descriptors = 0;
};

Footprint FootprintOf(pid_t pid) { return {ResidentKib(pid), OpenDescriptors(pid)}; }

std::string DemoTrainerBinary() { return BuiltBinary(DEMO_TRAINER_BINARY); }
std::string ResNet50Workload() {
  return std::string(COLLECTIVE_SOURCE_DIR) + "/tests/bench/workloads/resnet50_gradients.txt";
}

// The daemon sampled while a job ran: the largest footprint in the first
// half of the samples (which ends past the warm-up of the first steps) and
// in the second half.
struct JobFootprint {
  Footprint early;
  Footprint late;
};

Footprint Larger(const Footprint& a, const Footprint& b) {
  return {std::max(a.resident_kib, b.resident_kib), std::max(a.descriptors, b.descriptors)};
}

// One job of `ranks` demo trainers (ResNet-50's gradients averaged `steps`
// times, every result checked by the trainer), with the daemon sampled from
// /proc while it runs.
JobFootprint RunSampledJob(DaemonProcess& daemon, int ranks, int steps) {
  JobFootprint footprint;
  auto workers =
      daemon.StartWorkers(DemoTrainerBinary(), ranks, {ResNet50Workload(), std::to_string(steps)});
  EXPECT_TRUE(workers.ok()) << workers.status();
  if (!workers.ok()) return footprint;
  std::vector<Footprint> samples;
  const absl::Time deadline = absl::Now() + absl::Seconds(240);
  // A sample every 50 ms until the job ends: rank 0's exit ends the wait
  // early, so this is a sampling period, not a guess at how long anything
  // takes.
  while (!(*workers)[0].Wait(absl::Milliseconds(50)).has_value() && absl::Now() < deadline) {
    samples.push_back(FootprintOf(daemon.process().pid()));
  }
  EXPECT_EQ(WaitForWorkers(*workers, absl::Seconds(30)), "");
  // The halves are of the job running in earnest: from the first sample
  // halfway up from where the daemon started to its peak (before that the
  // job forms and its result segment is first touched; a fast job spends
  // half its samples there, which is no growth).
  int64_t peak = 0;
  for (const Footprint& sample : samples) peak = std::max(peak, sample.resident_kib);
  const int64_t start = samples.empty() ? 0 : samples.front().resident_kib;
  size_t first = 0;
  while (first < samples.size() && samples[first].resident_kib < start + (peak - start) / 2) {
    ++first;
  }
  const size_t running = samples.size() - first;
  for (size_t i = first; i < samples.size(); ++i) {
    Footprint& half = 2 * (i - first) < running ? footprint.early : footprint.late;
    half = Larger(half, samples[i]);
  }
  EXPECT_GE(running, 4u) << "too few samples of the daemon while the job ran";
  return footprint;
}

// The daemon's footprint once its descriptors are down to `target`, or
// after 5 s if they never are.
Footprint AwaitDescriptors(pid_t pid, size_t target) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  Footprint now = FootprintOf(pid);
  while (now.descriptors > target && absl::Now() < deadline) {
    // Polling /proc against a deadline.
    absl::SleepFor(absl::Milliseconds(10));
    now = FootprintOf(pid);
  }
  return now;
}

// What the daemon may grow by from one job to the next without it counting
// as a leak: allocator slack, not a per-step or per-job cost (a leak of one
// gradient exchange per step would be ~100 MiB a job).
int64_t ResidentToleranceKib(int64_t baseline_kib) {
  return std::max<int64_t>(8 * 1024, baseline_kib / 20);
}

TEST(SoakTest, ResNet50StepsLeaveTheDaemonsMemoryAndDescriptorsFlat) {
  const int jobs = static_cast<int>(FromEnvironment("COLLECTIVE_SOAK_JOBS", 3));
  const int steps = static_cast<int>(FromEnvironment("COLLECTIVE_SOAK_STEPS", 8));
  constexpr int kRanks = 2;
  auto daemon = DaemonProcess::Start({});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const pid_t pid = (*daemon)->process().pid();
  const Footprint started = FootprintOf(pid);
  ASSERT_GT(started.resident_kib, 0) << "cannot read the daemon's resident memory";
  std::cout << "soak: " << jobs << " jobs of " << steps << " ResNet-50 steps on " << kRanks
            << " ranks; the daemon at start: " << started.resident_kib << " KiB resident, "
            << started.descriptors << " descriptors" << std::endl;
  std::vector<JobFootprint> running;
  std::vector<Footprint> idle;
  for (int job = 0; job < jobs; ++job) {
    running.push_back(RunSampledJob(**daemon, kRanks, steps));
    ASSERT_FALSE(HasFailure()) << "job " << job;
    auto ended = (*daemon)->AwaitStatus(
        [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; },
        kStateTimeout);
    ASSERT_TRUE(ended.ok()) << ended.status();
    // The connection of the status query just made may still be open on
    // the daemon's side for a moment: after the first job, idle means back
    // at the first job's count, which a leak never reaches.
    idle.push_back(job == 0 ? FootprintOf(pid) : AwaitDescriptors(pid, idle[0].descriptors));
    const JobFootprint& ran = running.back();
    std::cout << "job " << job << ": peak " << ran.early.resident_kib << " KiB, "
              << ran.early.descriptors << " descriptors in its first half, "
              << ran.late.resident_kib << " KiB, " << ran.late.descriptors
              << " in its second; idle after it " << idle.back().resident_kib << " KiB, "
              << idle.back().descriptors << " descriptors" << std::endl;
  }
  ExpectNoSegments((*daemon)->socket());
  // Within a job, past its first steps, nothing grows; the first job is the
  // daemon's warm-up (the allocator's arenas, gRPC's threads), and every
  // later job leaves it where the first left it and peaks where it peaked.
  for (int job = 0; job < jobs; ++job) {
    const JobFootprint& ran = running[job];
    EXPECT_LE(ran.late.resident_kib,
              ran.early.resident_kib + ResidentToleranceKib(ran.early.resident_kib))
        << "job " << job;
    EXPECT_LE(ran.late.descriptors, ran.early.descriptors) << "job " << job;
    if (job == 0) continue;
    EXPECT_EQ(idle[job].descriptors, idle[0].descriptors) << "idle after job " << job;
    EXPECT_LE(idle[job].resident_kib,
              idle[0].resident_kib + ResidentToleranceKib(idle[0].resident_kib))
        << "idle after job " << job;
    const Footprint peak = Larger(ran.early, ran.late);
    const Footprint first = Larger(running[0].early, running[0].late);
    EXPECT_LE(peak.descriptors, first.descriptors) << "while job " << job << " ran";
    EXPECT_LE(peak.resident_kib, first.resident_kib + ResidentToleranceKib(first.resident_kib))
        << "while job " << job << " ran";
  }
  ExpectCleanStop(**daemon);
}

}  // namespace
}  // namespace collective::testing
