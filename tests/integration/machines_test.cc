// collectiverun across machines (-H naming hosts that are not this one), as
// horovodrun runs a job through mpirun: Open MPI's launcher reaches each
// host over real ssh (a private sshd, see ssh_machines.h), starts a
// collectived there, and then the ranks. Checked: every rank runs on its
// host with the placement a local rank gets, the daemons form one world
// (results across hosts), a failing rank's exit code comes back, a signal
// is forwarded, and nothing is left behind on any host.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/common/subprocess.h"
#include "tests/common/temporary_directory.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/ssh_machines.h"

namespace collective::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(120);

struct Launch {
  std::optional<int> status;
  std::string out;
  std::string err;
};

// The sockets collectiverun's daemons on other machines listen on (all of
// them this machine here), with their lock files.
std::set<std::string> DaemonSockets() {
  std::set<std::string> found;
  const std::string prefix = absl::StrCat("collectiverun-", ::geteuid(), "-");
  for (const auto& entry : std::filesystem::directory_iterator("/tmp")) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, prefix) && absl::StrContains(name, ".sock")) found.insert(name);
  }
  return found;
}

class MachinesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto machines = SshMachines::Start({"machine-a", "machine-b", "machine-c"});
    ASSERT_TRUE(machines.ok()) << machines.status();
    machines_ = std::move(*machines);
    sockets_before_ = DaemonSockets();
  }

  // Nothing of the job's daemons is left on any host.
  void TearDown() override {
    if (machines_ == nullptr) return;
    EXPECT_EQ(DaemonSockets(), sockets_before_) << "a daemon's socket or lock file is left";
  }

  absl::StatusOr<Subprocess> Start(const std::vector<std::string>& args,
                                   std::map<std::string, std::string> environment = {},
                                   bool bare_ssh_config = false) {
    std::vector<std::string> argv = {COLLECTIVERUN_BINARY};
    for (const std::string& flag : SmallMemoryFlags()) argv.push_back("--daemon-arg=" + flag);
    argv.insert(argv.end(), args.begin(), args.end());
    for (const auto& [name, value] :
         bare_ssh_config ? machines_->EnvironmentWithoutPortAndKey() : machines_->Environment()) {
      environment[name] = value;
    }
    environment.emplace("COLLECTIVE_SOCKET", "");
    environment.emplace("COLLECTIVE_JOB_ID", "");
    return Subprocess::Start(argv, environment);
  }

  Launch Finish(Subprocess& launcher) {
    Launch run;
    run.status = launcher.Wait(kTimeout);
    run.out = launcher.Stdout();
    run.err = launcher.Stderr();
    return run;
  }

  std::unique_ptr<SshMachines> machines_;
  std::set<std::string> sockets_before_;
};

TEST_F(MachinesTest, EveryRankRunsOnItsHostAndTheDaemonsFormOneWorld) {
  auto launcher = Start({"-np", "3", "-H", "machine-a:2,machine-b:1", TestWorkerBinary(), "matrix",
                         "--across-nodes", "--big-bytes", "4096"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  const Launch run = Finish(*launcher);
  ASSERT_TRUE(run.status.has_value()) << "collectiverun did not end; stderr:\n" << run.err;
  ASSERT_EQ(*run.status, 0) << run.out << run.err;
  // mpirun's --tag-output, as under horovodrun: "[1,<rank>]<stdout>:".
  std::set<std::string> ranks;
  static const std::regex kOk(R"(\[\d+,(\d+)\]<stdout>:ok \d+ cases on rank (\d+) of 3)");
  for (absl::string_view line : absl::StrSplit(run.out, '\n', absl::SkipEmpty())) {
    std::cmatch match;
    ASSERT_TRUE(std::regex_match(line.begin(), line.end(), match, kOk)) << line;
    EXPECT_EQ(match[1], match[2]) << line;
    ranks.insert(match[1]);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2"})) << run.out;
  // One login per host for the daemons, one per host for the ranks.
  EXPECT_GE(machines_->Logins(), 4);
  EXPECT_THAT(run.err, ::testing::Not(HasSubstr("Forwarding signal"))) << "mpirun's own notes";
}

#ifdef PYTHON_PACKAGE_DIR
// What a Horovod user runs, with one import changed.
TEST_F(MachinesTest, AHorovodScriptRunsAcrossTheMachines) {
  constexpr char kScript[] = R"(
import torch
import collective.torch as hvd
hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
print(f'rank {hvd.rank()}/{hvd.size()} local {hvd.local_rank()}/{hvd.local_size()} '
      f'cross {hvd.cross_rank()}/{hvd.cross_size()} sum {total.item():g}', flush=True)
hvd.shutdown()
)";
  auto launcher =
      Start({"-np", "3", "-H", "machine-a:2,machine-b:1", PYTHON_EXECUTABLE, "-c", kScript},
            {{"PYTHONPATH", PYTHON_PACKAGE_DIR}});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  const Launch run = Finish(*launcher);
  ASSERT_TRUE(run.status.has_value()) << run.err;
  ASSERT_EQ(*run.status, 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("[1,0]<stdout>:rank 0/3 local 0/2 cross 0/2 sum 6"));
  EXPECT_THAT(run.out, HasSubstr("[1,1]<stdout>:rank 1/3 local 1/2 cross 0/2 sum 6"));
  EXPECT_THAT(run.out, HasSubstr("[1,2]<stdout>:rank 2/3 local 0/1 cross 1/2 sum 6"));
}
#endif

// The daemons failing (here: a configuration they refuse) stop the ranks,
// which were waiting for them.
TEST_F(MachinesTest, DaemonsThatFailStopTheRanks) {
  auto launcher = Start({"--daemon-arg=--fusion-threshold-bytes=1GiB", "-np", "2", "-H",
                         "machine-a:1,machine-b:1", TestWorkerBinary(), "matrix", "--across-nodes",
                         "--big-bytes", "4096"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  const Launch run = Finish(*launcher);
  ASSERT_TRUE(run.status.has_value()) << run.err;
  EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 1) << *run.status << run.err;
  EXPECT_THAT(run.err, HasSubstr("[collectived] collectived: result_arena_bytes must be at least "
                                 "fusion_threshold_bytes"));
  EXPECT_THAT(run.err, HasSubstr("exited with code 2 while the ranks ran; stopping them"));
}

TEST_F(MachinesTest, EachRankGetsThePlacementALocalRankGets) {
  auto launcher =
      Start({"-np", "3", "-H", "machine-a:1,machine-b:2", "/bin/sh", "-c",
             "echo rank=$HOROVOD_RANK size=$HOROVOD_SIZE local=$COLLECTIVE_LOCAL_RANK/"
             "$COLLECTIVE_LOCAL_SIZE cross=$HOROVOD_CROSS_RANK/$HOROVOD_CROSS_SIZE "
             "host=$HOROVOD_HOSTNAME wait=$COLLECTIVE_CONNECT_TIMEOUT_SECONDS mine=$MINE"},
            {{"MINE", "exported"}});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  const Launch run = Finish(*launcher);
  ASSERT_TRUE(run.status.has_value()) << run.err;
  ASSERT_EQ(*run.status, 0) << run.out << run.err;
  for (const char* expected :
       {"rank=0 size=3 local=0/1 cross=0/2 host=machine-a wait=60 mine=exported",
        "rank=1 size=3 local=0/2 cross=1/2 host=machine-b wait=60 mine=exported",
        "rank=2 size=3 local=1/2 cross=1/2 host=machine-b wait=60 mine=exported"}) {
    EXPECT_THAT(run.out, HasSubstr(expected)) << run.err;
  }
}

// --hostfile as -H; --no-prefix and --output-filename go to mpirun, whose
// files are in its own layout (DIR/1/rank.<N>/stdout), as under horovodrun.
TEST_F(MachinesTest, AHostfileAndMpirunsOutputOptions) {
  TemporaryDirectory directory("out");
  const std::string hostfile = directory.path() + "/hosts";
  std::ofstream(hostfile) << "machine-a slots=1\nmachine-b slots=1\n";
  const std::string output = directory.path() + "/ranks";
  auto launcher = Start({"--no-prefix", "--output-filename", output, "-np", "2", "--hostfile",
                         hostfile, "/bin/sh", "-c", "echo out $HOROVOD_RANK $HOROVOD_HOSTNAME"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  const Launch run = Finish(*launcher);
  ASSERT_TRUE(run.status.has_value()) << run.err;
  ASSERT_EQ(*run.status, 0) << run.out << run.err;
  EXPECT_THAT("\n" + run.out, HasSubstr("\nout 1 machine-b\n")) << "without a tag";
  for (const auto& [rank, host] : {std::pair{0, "machine-a"}, std::pair{1, "machine-b"}}) {
    std::ifstream file(absl::StrCat(output, "/1/rank.", rank, "/stdout"));
    std::stringstream text;
    text << file.rdbuf();
    EXPECT_EQ(text.str(), absl::StrCat("out ", rank, " ", host, "\n")) << "rank " << rank;
  }
}

TEST_F(MachinesTest, AFailingRanksExitCodeEndsTheJob) {
  const absl::Time started = absl::Now();
  auto launcher = Start({"-np", "3", "-H", "machine-a:2,machine-b:1", "/bin/sh", "-c",
                         "if [ \"$HOROVOD_RANK\" = 2 ]; then exit 3; fi; exec sleep 600"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  const Launch run = Finish(*launcher);
  ASSERT_TRUE(run.status.has_value()) << run.err;
  EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 3) << *run.status << run.err;
  EXPECT_LT(absl::Now() - started, absl::Seconds(60)) << "the other ranks were not stopped";
}

TEST_F(MachinesTest, ASignalIsForwardedToTheRanks) {
  auto launcher = Start({"-np", "2", "-H", "machine-a:1,machine-b:1", "/bin/sh", "-c",
                         "echo running; exec sleep 600"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  // Both ranks run (their lines came back through mpirun) before the signal.
  const absl::Time deadline = absl::Now() + kTimeout;
  while (Occurrences(launcher->Stdout(), "running") < 2) {
    ASSERT_LT(absl::Now(), deadline) << launcher->Stderr();
    ASSERT_FALSE(launcher->Wait(absl::Milliseconds(20)).has_value()) << launcher->Stderr();
  }
  launcher->Signal(SIGTERM);
  const Launch run = Finish(*launcher);
  ASSERT_TRUE(run.status.has_value()) << run.err;
  EXPECT_TRUE(WIFEXITED(*run.status) && WEXITSTATUS(*run.status) == 128 + SIGTERM)
      << *run.status << run.err;
  EXPECT_THAT(run.err, HasSubstr("received SIGTERM; forwarding it to the ranks' mpirun"));
}

// horovodrun's flags for machines: the ssh configuration names neither
// the port nor the key, so the job reaches the hosts through -p and -i.
TEST_F(MachinesTest, HorovodrunsSshNetworkAndMpiFlagsReachMpirun) {
  const std::string port = std::to_string(machines_->port());
  auto launcher = Start({"--verbose",
                         "-p",
                         port,
                         "-i",
                         machines_->key(),
                         "--network-interface",
                         "lo",
                         "--start-timeout",
                         "45",
                         "--mpi-args=--mca btl_tcp_links '1'",
                         "-prefix-timestamp",
                         "--binding-args=--bind-to none --map-by slot",
                         "-np",
                         "2",
                         "-H",
                         "machine-a:1,machine-b:1",
                         TestWorkerBinary(),
                         "matrix",
                         "--across-nodes",
                         "--big-bytes",
                         "4096"},
                        {}, /*bare_ssh_config=*/true);
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  const Launch run = Finish(*launcher);
  ASSERT_TRUE(run.status.has_value()) << run.err;
  ASSERT_EQ(*run.status, 0) << run.out << run.err;
  EXPECT_EQ(Occurrences(run.out, "ok "), 2) << run.out;
  const std::string flags = absl::StrCat(
      "--mca plm_rsh_args -p ", port, " -i ", machines_->key(),
      " --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo --mca btl_tcp_links 1");
  EXPECT_EQ(Occurrences(run.err, flags), 2) << "both mpirun commands:\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr("COLLECTIVE_CONNECT_TIMEOUT_SECONDS=45"));
  // The ranks' mpirun: horovodrun's timestamps and binding.
  EXPECT_THAT(run.err, HasSubstr("--oversubscribe --bind-to none --map-by slot"));
  EXPECT_THAT(run.err, HasSubstr("--tag-output --timestamp-output"));
  EXPECT_THAT(run.err, HasSubstr("-x NCCL_SOCKET_IFNAME"));
}

TEST_F(MachinesTest, AConfiguredDaemonIsRefused) {
  auto configured = Start({"-np", "2", "-H", "machine-a:1,machine-b:1", "true"},
                          {{"COLLECTIVE_SOCKET", "/run/collectived/collectived.sock"}});
  ASSERT_TRUE(configured.ok());
  Launch run = Finish(*configured);
  ASSERT_TRUE(run.status.has_value());
  EXPECT_NE(WEXITSTATUS(*run.status), 0);
  EXPECT_THAT(run.err, HasSubstr("-H lists hosts on other machines, where collectiverun starts "
                                 "a collectived of its own on each"));
  EXPECT_EQ(machines_->Logins(), 0) << "nothing was started";
}

#ifdef PYTHON_PACKAGE_DIR
// Elastic jobs across machines (remote_hosts.h): workers started over ssh,
// each machine's copy of the rendezvous kept by collectiverun's agent there,
// the daemons of each generation's hosts an MPI world over ssh. Each job
// runs with a TMPDIR of its own, which holds the launcher's rendezvous
// directory and every host's copy: empty at the end, nothing is left.
class ElasticMachinesTest : public MachinesTest {
 protected:
  absl::StatusOr<Subprocess> StartElastic(const std::vector<std::string>& args,
                                          std::map<std::string, std::string> environment = {},
                                          bool bare_ssh_config = false) {
    environment["PYTHONPATH"] = PYTHON_PACKAGE_DIR;
    environment["PYTHONDONTWRITEBYTECODE"] = "1";
    environment["TMPDIR"] = temporary_.path();
    return Start(args, environment, bare_ssh_config);
  }

  // The discovery tests of tests/python/elastic, on machines a, b and c
  // in place of localhost, 127.0.0.1 and 127.0.0.2, the script listing
  // `listed` at the start.
  Launch RunDiscoveryTest(const std::string& test, const std::string& listed) {
    const std::string hosts = temporary_.path() + "/hosts";
    { std::ofstream(hosts) << listed; }
    const std::string elastic = COLLECTIVE_SOURCE_DIR "/tests/python/elastic";
    auto launcher =
        StartElastic({"--host-discovery-script", elastic + "/discover_hosts.sh", "--min-np", "2",
                      "-np", "3", PYTHON_EXECUTABLE, "-m", "pytest", "-q", "-s", "-p",
                      "no:cacheprovider", "--confcutdir=" + elastic, elastic + "/" + test},
                     {{"COLLECTIVE_TEST_HOSTS_FILE", hosts},
                      {"COLLECTIVE_TEST_NODES", "machine-a machine-b machine-c"},
                      {"COLLECTIVE_ELASTIC_TIMEOUT_S", "60"}});
    EXPECT_TRUE(launcher.ok()) << launcher.status();
    if (!launcher.ok()) return {};
    Launch run = Finish(*launcher);
    std::filesystem::remove(hosts);
    return run;
  }

  void TearDown() override {
    MachinesTest::TearDown();
    std::vector<std::string> left;
    for (const auto& entry : std::filesystem::directory_iterator(temporary_.path())) {
      left.push_back(entry.path().filename().string());
    }
    EXPECT_THAT(left, ::testing::IsEmpty()) << "left in the job's TMPDIR";
  }

  TemporaryDirectory temporary_{"elastic-machines"};
};

TEST_F(ElasticMachinesTest, AJobGoesOnWithoutTheMachineOfAFailedWorker) {
  const int logins_before = machines_->Logins();
  auto launcher =
      StartElastic({"--min-np", "2", "-np", "3", "-H", "machine-a:2,machine-b:1", PYTHON_EXECUTABLE,
                    "-u", COLLECTIVE_SOURCE_DIR "/examples/python/elastic_train.py", "--epochs",
                    "2", "--kill-worker", "2", "--kill-at-batch", "5"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  const Launch run = Finish(*launcher);
  ASSERT_TRUE(run.status.has_value()) << run.err;
  ASSERT_EQ(*run.status, 0) << run.out << run.err;
  // Worker 2, alone on machine-b, killed itself mid-step: its machine is
  // left out, and the job re-forms on machine-a's new daemon.
  EXPECT_THAT(run.err, HasSubstr("worker 2 (pid"));
  EXPECT_THAT(run.err, HasSubstr("blacklisting host machine-b for good; re-forming the job with "
                                 "2 workers as generation 1"));
  EXPECT_THAT(run.out, HasSubstr("[0] re-formed with 2 ranks"));
  EXPECT_THAT(run.out, HasSubstr("[0] epoch 0: 2 ranks, 480 samples (all)"));
  EXPECT_THAT(run.out, HasSubstr("[0] epoch 1: 2 ranks, 480 samples (all)"));
  EXPECT_THAT(run.out, HasSubstr("[0] done: 2 ranks hold the same weights"));
  // Over ssh: an agent per machine, each worker, and mpirun's daemons
  // (twice: the first world, and machine-a's alone).
  EXPECT_GE(machines_->Logins() - logins_before, 2 + 3 + 3);
}

// horovodrun's -p and -i reach every ssh of the job (the agents', the
// workers' and mpirun's), through an ssh configuration that names neither.
TEST_F(ElasticMachinesTest, HorovodrunsSshFlagsReachEverySshOfTheJob) {
  auto launcher = StartElastic(
      {"--min-np", "1", "-np", "2", "-H", "machine-a:1,machine-b:1", "-p",
       absl::StrCat(machines_->port()), "-i", machines_->key(), PYTHON_EXECUTABLE, "-u",
       COLLECTIVE_SOURCE_DIR "/examples/python/elastic_train.py", "--epochs", "1"},
      {}, /*bare_ssh_config=*/true);
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  const Launch run = Finish(*launcher);
  ASSERT_TRUE(run.status.has_value()) << run.err;
  ASSERT_EQ(*run.status, 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("[0] epoch 0: 2 ranks, 480 samples (all)"));
  EXPECT_THAT(run.out, HasSubstr("[0] done: 2 ranks hold the same weights"));
}

TEST_F(ElasticMachinesTest, ADiscoveryScriptMovesTheJobFromARemovedMachineToAnAddedOne) {
  const Launch run =
      RunDiscoveryTest("test_elastic_discovery_nodes.py", "machine-a:2\nmachine-b:1\n");
  ASSERT_TRUE(run.status.has_value()) << run.err;
  ASSERT_EQ(*run.status, 0) << run.out << run.err;
  EXPECT_THAT(run.err, HasSubstr("no longer lists machine-b"));
  EXPECT_THAT(run.err, HasSubstr("worker 3 added on machine-c"));
  EXPECT_THAT(run.out, HasSubstr("elastic across nodes:"));
  EXPECT_EQ(Occurrences(run.out, "1 passed"), 3u) << run.out;
}

TEST_F(ElasticMachinesTest, AMachineWhoseDaemonDiesIsLeftOut) {
  const Launch run =
      RunDiscoveryTest("test_elastic_discovery_node_dies.py", "machine-a:2\nmachine-b:1\n");
  ASSERT_TRUE(run.status.has_value()) << run.err;
  ASSERT_EQ(*run.status, 0) << run.out << run.err;
  // machine-b's agent relayed its daemon's exit, and collectiverun told
  // machine-a's daemon that its world lost a node (it does not wait for it).
  EXPECT_THAT(run.err, HasSubstr("the collectived of machine-b (node 1) exited while the job ran"));
  EXPECT_THAT(run.err, HasSubstr("received SIGUSR1: a node of the MPI world is lost"));
  EXPECT_EQ(Occurrences(run.out, "1 passed"), 2u) << run.out;
}

TEST_F(ElasticMachinesTest, AMachineWhoseAgentDiesIsLeftOut) {
  const Launch run =
      RunDiscoveryTest("test_elastic_machine_agent_dies.py", "machine-a:2\nmachine-b:1\n");
  ASSERT_TRUE(run.status.has_value()) << run.err;
  ASSERT_EQ(*run.status, 0) << run.out << run.err;
  EXPECT_THAT(run.err, HasSubstr("collectiverun's agent on machine-b ended (its ssh "));
  EXPECT_THAT(run.err, HasSubstr("the workers there can no longer rendezvous; blacklisting the "
                                 "host for good, and re-forming the job without it"));
  // Its worker there is stopped by ending its ssh session, and said so
  // (not as ssh's exit code 255).
  EXPECT_THAT(run.err, HasSubstr("(its ssh session to machine-b ended)"));
  EXPECT_THAT(run.err, HasSubstr("received SIGUSR1: a node of the MPI world is lost"));
  EXPECT_EQ(Occurrences(run.out, "1 passed"), 2u) << run.out;
}
#endif

}  // namespace
}  // namespace collective::testing
