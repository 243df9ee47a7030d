// client/launcher/elastic_world: the generations an elastic job goes
// through when workers come and go on several hosts (stand-in nodes): ranks
// grouped by node, and a new world of daemons only when the nodes change,
// started only once every worker has left its job on the old one.
#include "client/launcher/elastic_world.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace collective::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;

class ElasticWorldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = ElasticWorld::Create(
        {.min_ranks = 1, .max_ranks = 8, .restarts = 1, .daemon_per_host = true},
        {.socket = "", .job_id = "job", .size = 3}, {{"PATH", "/usr/bin:/bin"}}, {"/bin/true"},
        {.prefix = false});
    ASSERT_TRUE(world.ok()) << world.status();
    world_ = std::move(*world);
  }

  // The `world` file's lines, by their first word.
  std::map<std::string, std::string> Published() const {
    std::map<std::string, std::string> fields;
    std::ifstream in(world_->directory() + "/world");
    for (std::string line; std::getline(in, line);) {
      const std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 1));
      fields[parts[0]] = parts.size() > 1 ? parts[1] : "";
    }
    return fields;
  }

  // What a worker writes before it registers with generation `generation`.
  void Joins(int generation, int worker) const {
    std::ofstream(absl::StrCat(world_->directory(), "/joining-", generation, "-", worker));
  }

  // The hosts of the world of daemons to start, if one is due.
  std::optional<std::vector<int>> HostsToStart() const {
    const std::optional<ElasticWorld::DaemonPlan> plan = world_->DaemonsToStart();
    if (!plan.has_value()) return std::nullopt;
    return plan->hosts;
  }

  bool Said(int epoch) const {
    return std::filesystem::exists(absl::StrCat(world_->directory(), "/daemons-", epoch));
  }

  std::unique_ptr<ElasticWorld> world_;
  TrainerGroup trainers_;
};

TEST_F(ElasticWorldTest, GroupsTheRanksByNodeAndStartsDaemonsOnlyForNewNodes) {
  const int a = world_->HostNumber("localhost");
  const int b = world_->HostNumber("127.0.0.1");
  EXPECT_EQ(world_->HostNumber("localhost"), a);
  EXPECT_EQ(world_->SocketOf(b), absl::StrCat(world_->directory(), "/daemons/host1.sock"));
  ASSERT_TRUE(world_->Start(trainers_, {a, b, a}).ok());
  // Workers 0 and 2 on localhost (node 0), worker 1 on 127.0.0.1 (node 1).
  EXPECT_EQ(Published()["workers"], "0 2 1");
  EXPECT_EQ(Published()["local_sizes"], "2 1");
  EXPECT_EQ(Published()["daemons"], "0");
  // Every worker is new: the first daemons start at once.
  EXPECT_THAT(HostsToStart(), Optional(ElementsAre(a, b)));
  EXPECT_FALSE(Said(0));
  EXPECT_TRUE(world_->running_nodes().empty());
  ASSERT_TRUE(world_->DaemonsStarted().ok());
  EXPECT_TRUE(Said(0));
  EXPECT_THAT(world_->running_nodes(), ElementsAre(a, b));
  EXPECT_EQ(HostsToStart(), std::nullopt);

  // One more on a node the daemons serve already: the same daemons.
  ASSERT_TRUE(world_->Add(trainers_, a).ok());
  EXPECT_EQ(Published()["generation"], "1");
  EXPECT_EQ(Published()["workers"], "0 2 3 1");
  EXPECT_EQ(Published()["local_sizes"], "3 1");
  EXPECT_EQ(Published()["daemons"], "0");
  EXPECT_EQ(HostsToStart(), std::nullopt);

  // A replacement takes the failed worker's host: the same nodes.
  ASSERT_TRUE(world_->Remove(2, trainers_).ok());
  EXPECT_EQ(Published()["workers"], "0 3 4 1");
  EXPECT_EQ(Published()["daemons"], "0");

  // The last worker of node 1 is stopped: one node now, other daemons,
  // which start once every worker has said it joins generation 3 or later.
  ASSERT_TRUE(world_->Remove(1, trainers_, /*replace=*/false).ok());
  EXPECT_EQ(Published()["generation"], "3");
  EXPECT_EQ(Published()["workers"], "0 3 4");
  EXPECT_EQ(Published()["local_sizes"], "3");
  EXPECT_EQ(Published()["daemons"], "1");
  EXPECT_EQ(HostsToStart(), std::nullopt);
  Joins(3, 0);
  Joins(3, 3);
  Joins(2, 4);  // an earlier generation: still in its job on the old daemons
  EXPECT_EQ(HostsToStart(), std::nullopt);
  Joins(3, 4);
  EXPECT_THAT(HostsToStart(), Optional(ElementsAre(a)));
  ASSERT_TRUE(world_->DaemonsStarted().ok());
  EXPECT_TRUE(Said(1));

  // A worker on a new host: its node comes last, and the daemons of two
  // nodes start once the running workers leave their job.
  const int c = world_->HostNumber("127.0.0.2");
  ASSERT_TRUE(world_->Add(trainers_, c).ok());
  EXPECT_EQ(Published()["workers"], "0 3 4 5");
  EXPECT_EQ(Published()["local_sizes"], "3 1");
  EXPECT_EQ(Published()["daemons"], "2");
  EXPECT_EQ(HostsToStart(), std::nullopt);
  for (int worker : {0, 3, 4}) Joins(4, worker);
  EXPECT_THAT(HostsToStart(), Optional(ElementsAre(a, c)));
  ASSERT_TRUE(world_->DaemonsStarted().ok());

  // Those daemons are lost (one died, the launcher stopped the others):
  // the next generation needs new ones, on the same nodes too.
  world_->DaemonsLost();
  EXPECT_TRUE(world_->running_nodes().empty());
  EXPECT_EQ(HostsToStart(), std::nullopt) << "no generation for them yet";
  ASSERT_TRUE(world_->Remove(5, trainers_, /*replace=*/false).ok());
  ASSERT_TRUE(world_->Add(trainers_, c).ok());
  EXPECT_EQ(Published()["local_sizes"], "3 1");
  EXPECT_EQ(Published()["daemons"], "5");
  for (int worker : {0, 3, 4}) Joins(6, worker);
  EXPECT_THAT(HostsToStart(), Optional(ElementsAre(a, c)));
}

TEST_F(ElasticWorldTest, APlanMadeWhileDaemonsStartIsStartedNext) {
  const int a = world_->HostNumber("localhost");
  const int b = world_->HostNumber("127.0.0.1");
  ASSERT_TRUE(world_->Start(trainers_, {a, b, a}).ok());
  const std::optional<ElasticWorld::DaemonPlan> first = world_->DaemonsToStart();
  ASSERT_TRUE(first.has_value());
  // While the launcher starts them, node 1's only worker stops.
  ASSERT_TRUE(world_->Remove(1, trainers_, /*replace=*/false).ok());
  EXPECT_EQ(Published()["daemons"], "1");
  ASSERT_TRUE(world_->DaemonsStarted(*first).ok());
  EXPECT_TRUE(Said(0));
  EXPECT_FALSE(Said(1));
  EXPECT_THAT(world_->running_nodes(), ElementsAre(a, b));
  // The later plan is due once its workers leave the first world's job.
  EXPECT_EQ(HostsToStart(), std::nullopt);
  for (int worker : {0, 2}) Joins(1, worker);
  const std::optional<ElasticWorld::DaemonPlan> next = world_->DaemonsToStart();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->epoch, 1);
  EXPECT_THAT(next->hosts, ElementsAre(a));
}

TEST_F(ElasticWorldTest, TheFirstSurvivorsHostIsNodeZero) {
  const int a = world_->HostNumber("localhost");
  const int b = world_->HostNumber("127.0.0.1");
  ASSERT_TRUE(world_->Start(trainers_, {a, b, b}).ok());
  ASSERT_TRUE(world_->DaemonsStarted().ok());
  // Worker 0 goes with its host: worker 1, the first survivor, becomes
  // rank 0 (it holds the state the others restore), its host node 0.
  ASSERT_TRUE(world_->Remove(0, trainers_, /*replace=*/false).ok());
  EXPECT_EQ(Published()["workers"], "1 2");
  ASSERT_TRUE(world_->Add(trainers_, a).ok());
  EXPECT_EQ(Published()["workers"], "1 2 3");
  EXPECT_EQ(Published()["local_sizes"], "2 1");
}

TEST_F(ElasticWorldTest, AWithdrawnFailureCountsInTheGenerationThatAddsWorkersAtOnce) {
  // Fewer than --min-np would remain: the failures are held, and the
  // generation that brings new workers (two at once) is the one after them,
  // which the survivors waiting for a generation after a failure join.
  const int a = world_->HostNumber("localhost");
  const int b = world_->HostNumber("127.0.0.1");
  ASSERT_TRUE(world_->Start(trainers_, {a, a, b}).ok());
  const std::string failures = Published()["failures"];
  world_->Withdraw(2);
  EXPECT_EQ(Published()["generation"], "0") << "nothing published";
  EXPECT_THAT(world_->workers(), ElementsAre(0, 1));
  const absl::StatusOr<std::string> added = world_->Add(trainers_, std::vector<int>{b, b});
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(*added,
            "workers 3, 4 added on 127.0.0.1; the job re-forms with 4 workers as generation 1 at "
            "its next commit");
  EXPECT_EQ(Published()["workers"], "0 1 3 4");
  EXPECT_EQ(Published()["failures"], absl::StrCat(std::stoi(failures) + 1));
  EXPECT_FALSE(world_->Add(trainers_, std::vector<int>(5, a)).ok()) << "past --max-np 8";
  EXPECT_EQ(Published()["workers"], "0 1 3 4") << "none added";
}

}  // namespace
}  // namespace collective::launcher
