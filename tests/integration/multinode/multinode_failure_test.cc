// What happens across nodes when something dies or stalls, with daemons
// under a real `mpirun --enable-recovery` (so that the survivors report a
// death themselves) and real client processes running an allreduce loop:
// - a daemon killed mid-allreduce: every client on the other nodes gets an
//   error naming that node and its ranks within node_timeout_seconds, and
//   the surviving daemons exit, removing their sockets and segments;
// - a client killed: every rank on every node gets an error naming its
//   rank, and the daemons go on to serve the next job;
// - a tensor one rank never submits: reported and failed on every node,
//   naming exactly the missing rank, and the job goes on;
// - daemons told by their launcher that the world lost a node (SIGUSR1):
//   they fail the job and leave MPI at once, without waiting for a word
//   from the lost node.
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/integration/collectives_job.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/multinode/mpi_daemons.h"

namespace collective::testing {
namespace {

using ::testing::HasSubstr;

constexpr double kNodeTimeoutSeconds = 2;
// What a test allows beyond the node timeout for the error to arrive: a
// heartbeat interval, the event's hop to the other nodes, the client's wake.
constexpr absl::Duration kSlack = absl::Seconds(6);

std::vector<std::string> FailureFlags() {
  return {"--default-arena-bytes",   "16MiB",
          "--result-arena-bytes",    "64MiB",
          "--node-timeout-seconds",  absl::StrCat(kNodeTimeoutSeconds),
          "--heartbeat-interval-ms", "100"};
}

struct LoopJob {
  std::unique_ptr<MpiDaemons> daemons;
  std::vector<Subprocess> workers;
};

// Daemons for `local_sizes` and one allreduce loop per rank, running.
void StartLoop(LoopJob& job, const std::vector<int>& local_sizes,
               const std::vector<std::string>& flags = FailureFlags()) {
  auto daemons = MpiDaemons::Start(
      {.nodes = static_cast<int>(local_sizes.size()), .daemon_flags = flags, .recovery = true});
  ASSERT_TRUE(daemons.ok()) << daemons.status();
  job.daemons = std::move(*daemons);
  auto workers = job.daemons->StartWorkers(CollectivesWorkerBinary(), local_sizes, {"loop"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  job.workers = std::move(*workers);
  AwaitSaid(job.workers, "running\n", absl::Seconds(60));
}

TEST(MultiNodeFailureTest, ADaemonThatDiesFailsTheJobOnEveryOtherNodeInTime) {
  LoopJob job;
  ASSERT_NO_FATAL_FAILURE(StartLoop(job, {1, 1, 1}));
  const std::string socket0 = job.daemons->socket(0);
  const std::string socket2 = job.daemons->socket(2);
  auto victim = job.daemons->DaemonPid(1);
  ASSERT_TRUE(victim.ok()) << victim.status();
  const absl::Time killed = absl::Now();
  ASSERT_EQ(::kill(*victim, SIGKILL), 0);

  // Ranks 0 and 2 live on the other nodes.
  const absl::Duration bound = absl::Seconds(kNodeTimeoutSeconds) + kSlack;
  for (int rank : {0, 2}) {
    const std::optional<int> exit = job.workers[rank].Wait(killed + bound - absl::Now());
    ASSERT_TRUE(exit.has_value()) << "rank " << rank << " got no error within " << bound;
    EXPECT_TRUE(ExitedCleanly(exit)) << job.workers[rank].Describe(*exit);
    const std::string said = job.workers[rank].Stdout();
    EXPECT_THAT(said, HasSubstr("error after "));
    EXPECT_THAT(said, HasSubstr("node 1 (")) << "the error names the node";
    EXPECT_THAT(said, HasSubstr("rank 1)")) << "and its ranks";
    EXPECT_THAT(said, HasSubstr("stopped answering"));
  }
  // Rank 1 lost its own daemon.
  const std::optional<int> orphan = job.workers[1].Wait(absl::Seconds(30));
  ASSERT_TRUE(orphan.has_value()) << "rank 1 did not notice its daemon's death";
  EXPECT_THAT(job.workers[1].Stdout(), HasSubstr("error after "));

  // The survivors leave: no socket, no segment behind.
  ASSERT_TRUE(job.daemons->Wait(absl::Seconds(30)).has_value())
      << "the surviving daemons did not exit; mpirun's stderr: " << job.daemons->mpirun().Stderr();
  for (const std::string& socket : {socket0, socket2}) {
    EXPECT_FALSE(std::filesystem::exists(socket)) << socket;
    EXPECT_THAT(SegmentsOf(socket), ::testing::IsEmpty()) << socket;
  }
  EXPECT_THAT(job.daemons->mpirun().Stderr(), HasSubstr("it cannot form another job"));
}

TEST(MultiNodeFailureTest, DaemonsToldThatTheWorldLostANodeFailTheJobAndLeaveAtOnce) {
  LoopJob job;
  StartLoop(job, {1, 1});
  const std::string socket0 = job.daemons->socket(0);
  const std::string socket1 = job.daemons->socket(1);
  // Both pids first: once node 0 stops, node 1 soon stops too.
  std::vector<pid_t> pids;
  for (int node = 0; node < 2; ++node) {
    const absl::StatusOr<pid_t> pid = job.daemons->DaemonPid(node);
    ASSERT_TRUE(pid.ok()) << pid.status();
    pids.push_back(*pid);
  }
  ASSERT_EQ(::kill(pids[0], SIGUSR1), 0);
  ::kill(pids[1], SIGUSR1);  // it may have stopped already
  for (int rank = 0; rank < 2; ++rank) {
    const std::optional<int> exit = job.workers[rank].Wait(absl::Seconds(30));
    ASSERT_TRUE(exit.has_value()) << "rank " << rank << " did not hear that its job failed";
    EXPECT_THAT(job.workers[rank].Stdout(), HasSubstr("error after "));
  }
  ASSERT_TRUE(job.daemons->Wait(absl::Seconds(30)).has_value())
      << "the daemons did not exit; mpirun's stderr: " << job.daemons->mpirun().Stderr();
  // Node 0 took its SIGUSR1 (node 1 may hear of the failed job from node 0
  // first, which breaks its world too). Neither waited for the other's
  // stop notice (AnnounceStop).
  const std::string said = job.daemons->mpirun().Stderr();
  EXPECT_THAT(said, HasSubstr("shutting down: received SIGUSR1: a node of the MPI world is lost"));
  EXPECT_THAT(said, HasSubstr("a node of the MPI world is lost: leaving MPI without waiting"));
  EXPECT_THAT(said, ::testing::Not(HasSubstr("did not say that it stops")));
  for (const std::string& socket : {socket0, socket1}) {
    EXPECT_FALSE(std::filesystem::exists(socket)) << socket;
    EXPECT_THAT(SegmentsOf(socket), ::testing::IsEmpty()) << socket;
  }
}

TEST(MultiNodeFailureTest, AClientThatDiesFailsTheJobOnEveryNodeAndTheDaemonsGoOn) {
  LoopJob job;
  ASSERT_NO_FATAL_FAILURE(StartLoop(job, {1, 2}));
  const pid_t victim = job.workers[2].pid();  // rank 2, on node 1
  job.workers[2].Signal(SIGKILL);
  for (int rank : {0, 1}) {
    const std::optional<int> exit = job.workers[rank].Wait(absl::Seconds(30));
    ASSERT_TRUE(exit.has_value()) << "rank " << rank << " got no error";
    EXPECT_TRUE(ExitedCleanly(exit)) << job.workers[rank].Describe(*exit);
    EXPECT_THAT(job.workers[rank].Stdout(),
                HasSubstr(absl::StrCat("rank 2 (pid ", victim, ") disconnected")));
  }
  // The failed job drained what was decided; the next one runs.
  auto next = job.daemons->StartWorkers(CollectivesWorkerBinary(), {1, 2},
                                        {"repeat", "--steps", "2", "--across-nodes"});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(WaitForWorkers(*next, absl::Seconds(60)), "");
  EXPECT_TRUE(ExitedCleanly(job.daemons->Stop())) << job.daemons->mpirun().Stderr();
}

TEST(MultiNodeFailureTest, AStalledTensorIsReportedAndFailedOnEveryNodeNamingTheMissingRank) {
  std::vector<std::string> flags = FailureFlags();
  flags.insert(flags.end(), {"--stall-check-seconds", "1", "--stall-shutdown-seconds", "3"});
  auto daemons = MpiDaemons::Start({.nodes = 2, .daemon_flags = flags});
  ASSERT_TRUE(daemons.ok()) << daemons.status();
  // Ranks 0 (node 0), 1 and 2 (node 1); rank 2 never submits.
  auto workers =
      (*daemons)->StartWorkers(CollectivesWorkerBinary(), {1, 2}, {"stall", "--across-nodes"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(WaitForWorkers(*workers, absl::Seconds(60)), "");
  for (int rank : {0, 1}) {
    EXPECT_THAT((*workers)[rank].Stdout(),
                HasSubstr("error: DEADLINE_EXCEEDED: tensor 'stalled.tensor' of process set 0 "
                          "waited "))
        << "rank " << rank;
    EXPECT_THAT((*workers)[rank].Stdout(), HasSubstr(" s for ranks [2] to submit it"))
        << "rank " << rank << " must hear of rank 2 alone";
  }
  // Node 0, which sees every node, names rank 2 alone too (its log lines
  // are tagged [1,0] by mpirun).
  EXPECT_THAT((*daemons)->mpirun().Stderr(), HasSubstr("[1,0]<stderr>:2: [stalled.tensor]"));
  EXPECT_TRUE(ExitedCleanly((*daemons)->Stop())) << (*daemons)->mpirun().Stderr();
}

}  // namespace
}  // namespace collective::testing
