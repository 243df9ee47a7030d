// Where the ranks of a job live, and what a client learns from it about its
// machine's cores.
#include "daemon/job/node_layout.h"

#include <gtest/gtest.h>

namespace collective::daemon::job {
namespace {

TEST(NodeLayoutTest, NumbersRanksByNodeOffsetAndLocalRank) {
  const NodeLayout layout{.node = 1, .local_sizes = {2, 3, 1}, .hosts = {}};
  EXPECT_EQ(layout.world_size(), 6);
  EXPECT_EQ(layout.offset(), 2);
  EXPECT_EQ(layout.NodeOf(4), 1);
  EXPECT_EQ(layout.NodeOf(5), 2);
  EXPECT_TRUE(layout.IsLocal(2));
  EXPECT_FALSE(layout.IsLocal(1));
  EXPECT_FALSE(layout.homogeneous());
}

TEST(NodeLayoutTest, BusyThreadsOnHostCountTheRanksAndEnginesOfEveryNodeSharingTheMachine) {
  // Nodes 0 and 2 are stand-ins on one machine; node 1 has its own.
  const std::vector<std::string> hosts = {"a", "b", "a"};
  EXPECT_EQ((NodeLayout{.node = 0, .local_sizes = {2, 4, 1}, .hosts = hosts}).BusyThreadsOnHost(),
            (2 + 1) + (1 + 1));
  EXPECT_EQ((NodeLayout{.node = 2, .local_sizes = {2, 4, 1}, .hosts = hosts}).BusyThreadsOnHost(),
            (2 + 1) + (1 + 1));
  EXPECT_EQ((NodeLayout{.node = 1, .local_sizes = {2, 4, 1}, .hosts = hosts}).BusyThreadsOnHost(),
            4 + 1);
}

TEST(NodeLayoutTest, WithoutHostsOnlyThisNodeCounts) {
  EXPECT_EQ(NodeLayout::Single(4).BusyThreadsOnHost(), 5);
  EXPECT_EQ((NodeLayout{.node = 1, .local_sizes = {2, 3}, .hosts = {}}).BusyThreadsOnHost(), 4);
}

}  // namespace
}  // namespace collective::daemon::job
