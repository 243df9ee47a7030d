// client/launcher/host_discovery: Horovod's discovery-script contract (the
// lines it prints, which hosts are this machine) and running a real script.
#include "client/launcher/host_discovery.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace collective::launcher {
namespace {

using ::testing::HasSubstr;

TEST(HostDiscoveryTest, ParsesHostsWithAndWithoutSlots) {
  const auto hosts = ParseDiscoveredHosts("localhost:4\n\n  node-b  \n::1:2\n10.0.0.7:1\n", 3);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  ASSERT_EQ(hosts->size(), 4u);
  EXPECT_EQ((*hosts)[0].name, "localhost");
  EXPECT_EQ((*hosts)[0].slots, 4);
  EXPECT_EQ((*hosts)[1].name, "node-b");
  EXPECT_EQ((*hosts)[1].slots, 3) << "--slots-per-host for a host without ':slots'";
  EXPECT_EQ((*hosts)[2].name, "::1:2") << "an IPv6 address is a host of its own";
  EXPECT_EQ((*hosts)[2].slots, 3);
  EXPECT_EQ((*hosts)[3].name, "10.0.0.7");
  EXPECT_EQ((*hosts)[3].slots, 1);
  EXPECT_TRUE(ParseDiscoveredHosts("", 1)->empty());
}

TEST(HostDiscoveryTest, RefusesMalformedLines) {
  for (const char* bad : {"localhost:0", "localhost:-2", "localhost:four", ":3", "localhost:"}) {
    const auto hosts = ParseDiscoveredHosts(absl::StrCat("localhost:1\n", bad, "\n"), 1);
    ASSERT_FALSE(hosts.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(hosts.status())) << bad;
    EXPECT_THAT(hosts.status().message(), HasSubstr(absl::StrCat("'", bad, "'")));
  }
}

TEST(HostDiscoveryTest, KnowsThisMachine) {
  for (const char* local : {"localhost", "LOCALHOST", "127.0.0.1", "127.0.1.1", "::1"}) {
    EXPECT_TRUE(IsThisMachine(local)) << local;
  }
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof(name) - 1), 0);
  EXPECT_TRUE(IsThisMachine(name));
  EXPECT_TRUE(IsThisMachine(absl::StrCat(name, ".some.domain")));
  for (const char* remote : {"10.0.0.7", "node-that-is-not-here", "128.0.0.1"}) {
    EXPECT_FALSE(IsThisMachine(remote)) << remote;
  }
}

TEST(HostDiscoveryTest, ReadsHorovodrunsHostListAndHostfile) {
  auto hosts = ParseHostsOption("localhost:2,127.0.0.1,node-b:4");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[1].name, "127.0.0.1");
  EXPECT_EQ((*hosts)[1].slots, 1);
  EXPECT_EQ((*hosts)[2].slots, 4);
  EXPECT_FALSE(ParseHostsOption("localhost:0").ok());

  hosts = ParseHostfile("# the cluster\nlocalhost slots=2\n\n127.0.0.1   # one slot\n");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  ASSERT_EQ(hosts->size(), 2u);
  EXPECT_EQ((*hosts)[0].name, "localhost");
  EXPECT_EQ((*hosts)[0].slots, 2);
  EXPECT_EQ((*hosts)[1].slots, 1);
  for (const char* bad : {"localhost 2", "localhost slots=x", "localhost slots=2 extra"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseHostfile(bad).status())) << bad;
  }

  // Hosts of this machine only.
  const auto local = HostsOfThisMachine(*ParseHostsOption("localhost:2,127.0.0.1:3"), "-H");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->size(), 2u);
  EXPECT_EQ(TotalSlots(*local), 5);
  const auto remote = HostsOfThisMachine(*ParseHostsOption("localhost:2,node-b:4"), "-H");
  EXPECT_TRUE(absl::IsUnimplemented(remote.status()));
  EXPECT_THAT(remote.status().message(), HasSubstr("-H lists host 'node-b'"));
}

class ScriptTest : public ::testing::Test {
 protected:
  // A script with `body`, executable.
  std::string Script(const std::string& body) {
    const std::string path =
        absl::StrCat(::testing::TempDir(), "/discover-", ::getpid(), "-", ++count_, ".sh");
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0700);
    paths_.push_back(path);
    return path;
  }
  ~ScriptTest() override {
    for (const std::string& path : paths_) std::filesystem::remove(path);
  }

 private:
  int count_ = 0;
  std::vector<std::string> paths_;
};

TEST_F(ScriptTest, ListsEachHostOnceInTheOrderFirstNamed) {
  const HostDiscovery discovery(Script("echo localhost:2; echo 127.0.0.1; echo \"$EXTRA\""), 3,
                                {{"EXTRA", "localhost:4"}, {"PATH", "/usr/bin:/bin"}});
  const absl::StatusOr<std::vector<DiscoveredHost>> hosts = discovery.ListHosts();
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  ASSERT_EQ(hosts->size(), 2u);
  // localhost 2, then 4 more from the environment given; 127.0.0.1 is a
  // node of its own, with --slots-per-host.
  EXPECT_EQ((*hosts)[0].name, "localhost");
  EXPECT_EQ((*hosts)[0].slots, 6);
  EXPECT_EQ((*hosts)[1].name, "127.0.0.1");
  EXPECT_EQ((*hosts)[1].slots, 3);
  EXPECT_EQ(TotalSlots(*hosts), 9);
}

TEST_F(ScriptTest, ReadsAScriptThatWritesMuchToStderr) {
  // More than a pipe holds on stderr before stdout: both are read together.
  const HostDiscovery discovery(
      Script("head -c 300000 /dev/zero | tr '\\0' x >&2; echo localhost:2"), 1,
      {{"PATH", "/usr/bin:/bin"}});
  const absl::StatusOr<std::vector<DiscoveredHost>> hosts = discovery.ListHosts(absl::Seconds(5));
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(TotalSlots(*hosts), 2);
}

TEST_F(ScriptTest, SaysWhyItCannotUseTheScript) {
  const Environment path = {{"PATH", "/usr/bin:/bin"}};
  absl::StatusOr<std::vector<DiscoveredHost>> slots =
      HostDiscovery(Script("echo 'no cluster today' >&2; exit 3"), 1, path).ListHosts();
  EXPECT_TRUE(absl::IsFailedPrecondition(slots.status())) << slots.status();
  EXPECT_THAT(slots.status().message(), HasSubstr("exited with code 3: no cluster today"));

  slots = HostDiscovery(Script("echo localhost:2; echo node-b:4"), 1, path).ListHosts();
  EXPECT_TRUE(absl::IsUnimplemented(slots.status())) << slots.status();
  EXPECT_THAT(slots.status().message(),
              HasSubstr("lists host 'node-b', which is not this machine"));
  // Unless the job may reach other machines (its own daemons, over ssh).
  HostDiscovery across(Script("echo localhost:2; echo node-b:4; echo localhost:1"), 1, path);
  across.AllowOtherMachines();
  slots = across.ListHosts();
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 2u);
  EXPECT_EQ((*slots)[0].name, "localhost");
  EXPECT_EQ((*slots)[0].slots, 3);
  EXPECT_EQ((*slots)[1].name, "node-b");

  slots = HostDiscovery(Script("echo localhost:x"), 1, path).ListHosts();
  EXPECT_TRUE(absl::IsInvalidArgument(slots.status())) << slots.status();

  slots = HostDiscovery("/nonexistent/discover.sh", 1, path).ListHosts();
  EXPECT_TRUE(absl::IsNotFound(slots.status())) << slots.status();
  EXPECT_THAT(slots.status().message(), HasSubstr("host discovery: cannot start"));

  // A script that does not finish is killed at the deadline.
  slots = HostDiscovery(Script("exec sleep 30"), 1, path).ListHosts(absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(slots.status())) << slots.status();
  EXPECT_THAT(slots.status().message(), HasSubstr("ran longer than 200ms"));
}

}  // namespace
}  // namespace collective::launcher
