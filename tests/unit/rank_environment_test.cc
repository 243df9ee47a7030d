// client/launcher/rank_environment: what each rank finds in its
// environment, replacing stale values and keeping the rest.
#include "client/launcher/rank_environment.h"

#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace collective::launcher {
namespace {

using ::testing::Contains;

TEST(RankEnvironmentTest, SetsEveryLaunchersVariables) {
  const Environment base = {{"PATH", "/bin"}, {"RANK", "7"}, {"COLLECTIVE_SOCKET", "/old"}};
  const Environment env =
      RankEnvironment(base, {.socket = "/tmp/d/collectived.sock", .job_id = "j", .size = 4}, 2);
  const Environment expected = {
      {"PATH", "/bin"},
      {"COLLECTIVE_SOCKET", "/tmp/d/collectived.sock"},
      {"COLLECTIVE_JOB_ID", "j"},
      {"COLLECTIVE_LOCAL_RANK", "2"},
      {"COLLECTIVE_LOCAL_SIZE", "4"},
      {"HOROVOD_RANK", "2"},
      {"HOROVOD_SIZE", "4"},
      {"HOROVOD_LOCAL_RANK", "2"},
      {"HOROVOD_LOCAL_SIZE", "4"},
      {"HOROVOD_CROSS_RANK", "0"},
      {"HOROVOD_CROSS_SIZE", "1"},
      {"HOROVOD_HOSTNAME", "localhost"},
      {"RANK", "2"},
      {"WORLD_SIZE", "4"},
      {"LOCAL_RANK", "2"},
      {"LOCAL_SIZE", "4"},
      {"LOCAL_WORLD_SIZE", "4"},
  };
  EXPECT_EQ(env, expected);
}

TEST(RankEnvironmentTest, PlacesARankOfANodeAmongSeveral) {
  // Rank 4 of 5: local rank 1 of the 2 on node 1, of 2 nodes.
  const Environment env = RankEnvironment(
      {}, "/d/host1.sock", "j.3", "127.0.0.2",
      {.rank = 4, .size = 5, .local_rank = 1, .local_size = 2, .cross_rank = 1, .cross_size = 2});
  const Environment expected = {
      {"COLLECTIVE_SOCKET", "/d/host1.sock"},
      {"COLLECTIVE_JOB_ID", "j.3"},
      {"COLLECTIVE_LOCAL_RANK", "1"},
      {"COLLECTIVE_LOCAL_SIZE", "2"},
      {"HOROVOD_RANK", "4"},
      {"HOROVOD_SIZE", "5"},
      {"HOROVOD_LOCAL_RANK", "1"},
      {"HOROVOD_LOCAL_SIZE", "2"},
      {"HOROVOD_CROSS_RANK", "1"},
      {"HOROVOD_CROSS_SIZE", "2"},
      {"HOROVOD_HOSTNAME", "127.0.0.2"},
      {"RANK", "4"},
      {"WORLD_SIZE", "5"},
      {"LOCAL_RANK", "1"},
      {"LOCAL_SIZE", "2"},
      {"LOCAL_WORLD_SIZE", "2"},
  };
  EXPECT_EQ(env, expected);
}

TEST(RankEnvironmentTest, EnvpHasOneEntryPerVariable) {
  EXPECT_THAT(ToEnvp({{"A", "1"}, {"B", "x=y"}}), Contains("B=x=y"));
  EXPECT_EQ(ToEnvp({{"A", "1"}, {"B", "x=y"}}).size(), 2u);
}

TEST(RankEnvironmentTest, CurrentEnvironmentReadsThisProcess) {
  ::setenv("COLLECTIVE_LAUNCHER_TEST", "a=b", 1);
  EXPECT_EQ(CurrentEnvironment()["COLLECTIVE_LAUNCHER_TEST"], "a=b");
}

}  // namespace
}  // namespace collective::launcher
