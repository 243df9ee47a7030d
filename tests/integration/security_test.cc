// Who may talk to collectived, and who may touch its files: the uid and
// group policy, what a refused user is told, the modes and owners of the
// socket, its directory and the segments. The SecurityTest cases run as
// root and their workers drop to uid 65534 (nobody), keeping group 0 (the
// 0660 socket's group, so admitted) or the supplementary groups a case
// names; their socket directory is 0755 so that the filesystem lets them in.
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/common/temporary_directory.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

constexpr uid_t kNobody = 65534;
constexpr absl::Duration kTimeout = absl::Seconds(15);

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to run workers as another uid";
  }

  absl::StatusOr<std::unique_ptr<DaemonProcess>> StartDaemon(std::vector<std::string> extra) {
    std::vector<std::string> flags = SmallMemoryFlags();
    flags.insert(flags.end(), extra.begin(), extra.end());
    return DaemonProcess::Start({.flags = flags, .directory_mode = 0755});
  }
};

// A peer the file system lets in (here: the socket opened to everyone, as
// an operator may do, or a peer with CAP_DAC_OVERRIDE) but the daemon's
// policy does not: its calls are answered PERMISSION_DENIED with the reason
// and how to be admitted, which its client library and collectivectl
// print, and the daemon logs the refusal.
TEST_F(SecurityTest, UidNotAllowedIsToldWhyAndHowToBeAdmitted) {
  auto daemon = StartDaemon({});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ASSERT_EQ(::chmod((*daemon)->socket().c_str(), 0666), 0);
  auto worker = (*daemon)->StartWorker(
      TestWorkerBinary(), 0, 1,
      {"as-uid", "65534", "--groups", "", "--expect",
       absl::StrCat("PERMISSION_DENIED: collectived at ", (*daemon)->socket(),
                    " refused this process (uid 65534): collectived refuses pid ")});
  ASSERT_TRUE(worker.ok()) << worker.status();
  const auto exited = worker->Wait(kTimeout);
  ASSERT_TRUE(ExitedCleanly(exited)) << (exited ? worker->Describe(*exited) : "still runs");
  const std::string refusal = absl::StrCat(
      "collectived refuses pid ", worker->pid(),
      " uid 65534 gid 65534 (groups []): uid 65534 is neither root, the daemon's uid (0) nor in "
      "allowed_uids [], and none of its groups is the socket's group (root, gid 0) or in "
      "allowed_gids []. To be admitted, join group 'root' (sudo usermod -aG root USER, then log "
      "in again) or have the daemon's configuration list uid 65534 in allowed_uids");
  EXPECT_TRUE(absl::StrContains(worker->Stdout(), refusal)) << worker->Stdout();
  EXPECT_TRUE(absl::StrContains(
      (*daemon)->process().Stderr(),
      absl::StrCat(
          "connection from pid ", worker->pid(),
          " uid 65534 gid 65534 refused (its calls are answered PERMISSION_DENIED): ", refusal)))
      << (*daemon)->process().Stderr();

  // collectivectl says the same.
  const CommandResult ctl =
      RunCommand({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                  CollectivectlBinary(), "--socket", (*daemon)->socket(), "status"});
  EXPECT_EQ(ctl.exit_code, 1) << ctl.err;
  EXPECT_TRUE(absl::StartsWith(
      ctl.err, absl::StrCat("collectivectl: ", (*daemon)->socket(), ": collectived refuses pid ")))
      << ctl.err;
  EXPECT_TRUE(absl::StrContains(ctl.err, "To be admitted, join group 'root'")) << ctl.err;

  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->job().state(), v1::JOB_STATE_IDLE);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  EXPECT_TRUE((*daemon)->Segments().empty());
}

// A user outside the socket's group cannot even connect (mode 0660): the
// client and collectivectl say so at once, naming the group to join,
// instead of gRPC's "Permission denied" after the connect timeout.
TEST_F(SecurityTest, UserOutsideTheSocketGroupIsToldWhichGroupToJoin) {
  auto daemon = StartDaemon({"--socket-group", "4242"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string advice =
      absl::StrCat("uid 65534 may not connect to collectived's socket ", (*daemon)->socket(),
                   " (mode 0660): only its owner and members of its group '");
  auto worker = (*daemon)->StartWorker(TestWorkerBinary(), 0, 1,
                                       {"as-uid", "65534", "--groups", "", "--expect", advice});
  ASSERT_TRUE(worker.ok()) << worker.status();
  const auto exited = worker->Wait(kTimeout);
  ASSERT_TRUE(ExitedCleanly(exited)) << (exited ? worker->Describe(*exited) : "still runs");
  EXPECT_TRUE(absl::StrContains(worker->Stdout(), "To be admitted, join the group (sudo usermod"))
      << worker->Stdout();

  const CommandResult ctl =
      RunCommand({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                  CollectivectlBinary(), "--socket", (*daemon)->socket(), "health", "--wait"});
  EXPECT_EQ(ctl.exit_code, 1) << ctl.err;
  EXPECT_TRUE(absl::StartsWith(ctl.err, absl::StrCat("collectivectl: ", advice))) << ctl.err;
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

// Trainers are given the daemon by being put in the socket's group (or in
// a group allowed_gids lists) as a supplementary group, their primary group
// staying their own: admitted.
TEST_F(SecurityTest, SupplementaryMemberOfTheSocketGroupIsAdmitted) {
  auto daemon = StartDaemon({"--socket-group", "4242"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto worker =
      (*daemon)->StartWorker(TestWorkerBinary(), 0, 1, {"as-uid", "65534", "--groups", "100,4242"});
  ASSERT_TRUE(worker.ok()) << worker.status();
  const auto exited = worker->Wait(kTimeout);
  ASSERT_TRUE(ExitedCleanly(exited)) << (exited ? worker->Describe(*exited) : "still runs");
  EXPECT_EQ(worker->Stdout(), "ok as uid 65534\n");
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

TEST_F(SecurityTest, SupplementaryMemberOfAnAllowedGidIsAdmitted) {
  auto daemon = StartDaemon({"--allowed-gids", "4243"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ASSERT_EQ(::chmod((*daemon)->socket().c_str(), 0666), 0);
  auto worker =
      (*daemon)->StartWorker(TestWorkerBinary(), 0, 1, {"as-uid", "65534", "--groups", "4243"});
  ASSERT_TRUE(worker.ok()) << worker.status();
  const auto exited = worker->Wait(kTimeout);
  ASSERT_TRUE(ExitedCleanly(exited)) << (exited ? worker->Describe(*exited) : "still runs");
  EXPECT_EQ(worker->Stdout(), "ok as uid 65534\n");
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

TEST_F(SecurityTest, AllowedUidConnectsAndAllreduces) {
  auto daemon = StartDaemon({"--allowed-uids", "65534"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  // The worker opens its segments read-write as uid 65534: that works only
  // if the daemon gave them to that uid.
  auto worker = (*daemon)->StartWorker(TestWorkerBinary(), 0, 1, {"as-uid", "65534"});
  ASSERT_TRUE(worker.ok()) << worker.status();
  const auto exited = worker->Wait(kTimeout);
  ASSERT_TRUE(ExitedCleanly(exited)) << (exited ? worker->Describe(*exited) : "still runs");
  EXPECT_EQ(worker->Stdout(), "ok as uid 65534\n");
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  EXPECT_TRUE((*daemon)->Segments().empty());
}

TEST_F(SecurityTest, SocketAndSegmentsAreNotOpenToOthers) {
  auto daemon = StartDaemon({"--allowed-uids", "65534"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();

  struct stat info {};
  ASSERT_EQ(::stat((*daemon)->socket().c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0660u);
  ASSERT_EQ(::stat((*daemon)->directory().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & S_IWOTH, 0u);

  // A job of two uid-65534 clients, blocked mid-allreduce so that its
  // segments exist while we look at them.
  auto victim =
      (*daemon)->StartWorker(TestWorkerBinary(), 1, 2, {"as-uid", "65534", "--then", "victim"});
  ASSERT_TRUE(victim.ok()) << victim.status();
  auto waiter = (*daemon)->StartWorker(
      TestWorkerBinary(), 0, 2,
      {"as-uid", "65534", "--then", "wait-stuck", "--expect", "disconnected"});
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  // Both mid-allreduce: the waiter on 'stuck', the victim on its own (so
  // that it has opened its session before it is killed).
  auto blocked = (*daemon)->AwaitStatus(StuckJobBlocked, kTimeout);
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  ASSERT_EQ(blocked->clients_size(), 2);
  for (const v1::ClientStatus& client : blocked->clients()) EXPECT_EQ(client.uid(), kNobody);

  int client_segments = 0;
  int result_segments = 0;
  int doorbell_segments = 0;
  for (const std::string& name : (*daemon)->Segments()) {
    ASSERT_EQ(::stat(("/dev/shm/" + name).c_str(), &info), 0) << name;
    // Names end in ".c<client id>", ".r<job>" or ".d<job>". Client
    // segments are read-write to their client only. The job's result and
    // doorbell segments stay the daemon's (so no client can resize them);
    // the result segment is read-only to the job's group, the doorbell
    // (one futex word every client rings) read-write to it.
    const char kind = name[name.rfind('.') + 1];
    ASSERT_TRUE(kind == 'c' || kind == 'r' || kind == 'd') << name;
    if (kind == 'c') {
      ++client_segments;
      EXPECT_EQ(info.st_uid, kNobody) << name;
      EXPECT_EQ(info.st_mode & 07777, 0600u) << name;
    } else if (kind == 'd') {
      ++doorbell_segments;
      EXPECT_EQ(info.st_uid, ::geteuid()) << name;
      EXPECT_EQ(info.st_gid, kNobody) << name;
      EXPECT_EQ(info.st_mode & 07777, 0660u) << name;
    } else {
      ++result_segments;
      EXPECT_EQ(info.st_uid, ::geteuid()) << name;
      EXPECT_EQ(info.st_gid, kNobody) << name;
      EXPECT_EQ(info.st_mode & 07777, 0440u) << name;
    }
  }
  EXPECT_EQ(client_segments, 2);
  EXPECT_EQ(result_segments, 1);
  EXPECT_EQ(doorbell_segments, 1);

  victim->Signal(SIGKILL);
  const auto waited = waiter->Wait(kTimeout);
  EXPECT_TRUE(ExitedCleanly(waited)) << (waited ? waiter->Describe(*waited) : "still runs");
  auto idle = (*daemon)->AwaitStatus(
      [](const v1::StatusResponse& s) { return s.job().state() == v1::JOB_STATE_IDLE; }, kTimeout);
  EXPECT_TRUE(idle.ok()) << idle.status();
  EXPECT_TRUE((*daemon)->Segments().empty());
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

TEST(SocketDirectoryTest, WorldWritableIsRefused) {
  TemporaryDirectory directory("sec");
  ASSERT_FALSE(directory.path().empty());
  ASSERT_EQ(::chmod(directory.path().c_str(), 0777), 0);
  const std::string socket = directory.path() + "/collectived.sock";
  auto daemon = Subprocess::Start({CollectivedBinary(), "--socket", socket});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const auto exited = daemon->Wait(kTimeout);
  ASSERT_TRUE(exited.has_value()) << "the daemon serves a world-writable directory";
  EXPECT_FALSE(ExitedCleanly(exited));
  EXPECT_TRUE(absl::StrContains(daemon->Stderr(),
                                absl::StrCat("socket directory ", directory.path(),
                                             " is world-writable without the sticky bit")))
      << daemon->Stderr();
  EXPECT_FALSE(std::filesystem::exists(socket));
}

TEST(SocketDirectoryTest, CreatedOneIsNotWorldWritable) {
  TemporaryDirectory directory("sec");
  ASSERT_FALSE(directory.path().empty());
  const std::string created = directory.path() + "/run";
  auto daemon =
      DaemonProcess::Start({.flags = SmallMemoryFlags(), .socket = created + "/collectived.sock"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  struct stat info {};
  ASSERT_EQ(::stat(created.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat((*daemon)->socket().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0660u);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

}  // namespace
}  // namespace collective::testing
