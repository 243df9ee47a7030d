// daemon/process_sets: the global set, adding and removing sets, ids reused
// smallest first, the checks on a set's ranks and their messages, RankOf and
// FindForMember.
#include "daemon/job/process_sets.h"

#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace collective::daemon::job {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

using Ranks = std::vector<int32_t>;

// The table's sets as (id, ranks).
std::vector<std::pair<int32_t, Ranks>> Sets(const job::ProcessSetTable& table) {
  std::vector<std::pair<int32_t, Ranks>> sets;
  for (const auto& [id, set] : table.sets()) {
    EXPECT_EQ(set.id, id) << "a set knows its own id";
    sets.emplace_back(id, set.ranks);
  }
  return sets;
}

TEST(ProcessSetTest, RankOfCountsWithinTheSetInAscendingOrder) {
  const job::ProcessSet set{.id = 3, .ranks = {1, 4, 6}};
  EXPECT_EQ(set.size(), 3);
  EXPECT_EQ(set.RankOf(1), 0);
  EXPECT_EQ(set.RankOf(4), 1);
  EXPECT_EQ(set.RankOf(6), 2);
  for (int32_t outsider : {-1, 0, 2, 5, 7, 100}) {
    EXPECT_EQ(set.RankOf(outsider), -1) << outsider;
  }
  EXPECT_EQ(job::ProcessSet{}.RankOf(0), -1) << "an empty set has no members";
}

TEST(ProcessSetTest, RanksString) {
  EXPECT_EQ(job::RanksString(Ranks{}), "[]");
  EXPECT_EQ(job::RanksString(Ranks{3}), "[3]");
  EXPECT_EQ(job::RanksString(Ranks{0, 2, 3}), "[0, 2, 3]");
}

TEST(ProcessSetTableTest, TheGlobalSetHoldsEveryRank) {
  const job::ProcessSetTable table(4);
  EXPECT_THAT(Sets(table), ElementsAre(Pair(0, Ranks{0, 1, 2, 3})));
  const job::ProcessSet* global = table.Find(0);
  ASSERT_NE(global, nullptr);
  EXPECT_EQ(global->size(), 4);
  EXPECT_EQ(global->RankOf(3), 3) << "in the global set, set ranks are global ranks";
  EXPECT_EQ(table.Find(1), nullptr);
  EXPECT_EQ(table.Find(-1), nullptr);

  const job::ProcessSetTable single(1);
  EXPECT_THAT(Sets(single), ElementsAre(Pair(0, Ranks{0})));
}

TEST(ProcessSetTableTest, AddSortsTheRanksAndHandsOutIdsFromOne) {
  job::ProcessSetTable table(6);
  const auto first = table.Add(Ranks{5, 1, 3});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, 1);
  const auto second = table.Add(Ranks{0});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, 2);
  EXPECT_THAT(Sets(table), ElementsAre(Pair(0, Ranks{0, 1, 2, 3, 4, 5}), Pair(1, Ranks{1, 3, 5}),
                                       Pair(2, Ranks{0})));
  EXPECT_EQ(table.Find(1)->RankOf(5), 2);
  EXPECT_EQ(table.Find(1)->RankOf(0), -1);
}

TEST(ProcessSetTableTest, RemovedIdsAreReusedSmallestFirst) {
  job::ProcessSetTable table(4);
  for (const Ranks& ranks : {Ranks{0}, Ranks{1}, Ranks{2}, Ranks{3}}) {
    ASSERT_TRUE(table.Add(ranks).ok());
  }
  ASSERT_TRUE(table.Remove(3).ok());
  ASSERT_TRUE(table.Remove(1).ok());
  EXPECT_THAT(Sets(table),
              ElementsAre(Pair(0, Ranks{0, 1, 2, 3}), Pair(2, Ranks{1}), Pair(4, Ranks{3})));
  auto id = table.Add(Ranks{0, 1});
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, 1) << "the smallest free id";
  id = table.Add(Ranks{2, 3});
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, 3);
  id = table.Add(Ranks{1, 2});
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, 5) << "no gap left: past the largest";
  // A removed set's ranks may be added again, under whatever id is free.
  ASSERT_TRUE(table.Remove(2).ok());
  id = table.Add(Ranks{1});
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, 2);
}

TEST(ProcessSetTableTest, RemoveRefusesTheGlobalSetAndUnknownIds) {
  job::ProcessSetTable table(2);
  absl::Status status = table.Remove(0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "the global process set (id 0) cannot be removed");
  status = table.Remove(1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "process set 1 does not exist");
  status = table.Remove(-4);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "process set -4 does not exist");

  ASSERT_TRUE(table.Add(Ranks{1}).ok());
  ASSERT_TRUE(table.Remove(1).ok());
  status = table.Remove(1);
  EXPECT_EQ(status.message(), "process set 1 does not exist") << "removed once only";
  EXPECT_THAT(Sets(table), ElementsAre(Pair(0, Ranks{0, 1})));
}

TEST(ProcessSetTableTest, AddRefusesDuplicatesOfExistingSets) {
  job::ProcessSetTable table(4);
  ASSERT_TRUE(table.Add(Ranks{1, 2}).ok());
  auto duplicate = table.Add(Ranks{2, 1});
  EXPECT_EQ(duplicate.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(duplicate.status().message(), "process set [1, 2] exists already (id 1)")
      << "the order of the ranks does not matter";

  auto global = table.Add(Ranks{3, 0, 2, 1});
  EXPECT_EQ(global.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(global.status().message(),
            "process set [0, 1, 2, 3] is the global process set (id 0), which always exists");
  EXPECT_EQ(table.sets().size(), 2u) << "refusals add nothing";

  // A subset or superset of an existing set is a set of its own.
  EXPECT_TRUE(table.Add(Ranks{1}).ok());
  EXPECT_TRUE(table.Add(Ranks{1, 2, 3}).ok());
}

TEST(ProcessSetTableTest, AddChecksTheRanksAsNormalizeDoes) {
  job::ProcessSetTable table(3);
  EXPECT_EQ(table.Add(Ranks{}).status().message(), "a process set needs at least one rank");
  EXPECT_EQ(table.Add(Ranks{0, 3}).status().message(),
            "rank 3 of process set [0, 3] is not a rank of the job (0 to 2)");
  EXPECT_EQ(table.Add(Ranks{1, 1}).status().message(),
            "rank 1 is listed twice in process set [1, 1]");
  EXPECT_EQ(table.sets().size(), 1u);
}

TEST(ProcessSetTableTest, NormalizeSortsAndRefusesBadRanks) {
  auto sorted = job::ProcessSetTable::Normalize(Ranks{4, 0, 2}, 5);
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  EXPECT_THAT(*sorted, ElementsAre(0, 2, 4));
  sorted = job::ProcessSetTable::Normalize(Ranks{0, 1, 2, 3, 4}, 5);
  ASSERT_TRUE(sorted.ok()) << "every rank of the job: Normalize does not compare with the table";

  struct Case {
    Ranks ranks;
    std::string message;
  };
  const Case cases[] = {
      {{}, "a process set needs at least one rank"},
      {{5}, "rank 5 of process set [5] is not a rank of the job (0 to 4)"},
      {{-1, 2}, "rank -1 of process set [-1, 2] is not a rank of the job (0 to 4)"},
      // The message quotes the ranks as given, and names the smallest bad one.
      {{3, 9, 7}, "rank 7 of process set [3, 9, 7] is not a rank of the job (0 to 4)"},
      {{2, 0, 2}, "rank 2 is listed twice in process set [2, 0, 2]"},
      {{1, 1, 1}, "rank 1 is listed twice in process set [1, 1, 1]"},
  };
  for (const Case& c : cases) {
    const auto normalized = job::ProcessSetTable::Normalize(c.ranks, 5);
    EXPECT_EQ(normalized.status().code(), absl::StatusCode::kInvalidArgument)
        << job::RanksString(c.ranks);
    EXPECT_EQ(normalized.status().message(), c.message);
  }
}

TEST(ProcessSetTableTest, FindForMember) {
  job::ProcessSetTable table(4);
  ASSERT_TRUE(table.Add(Ranks{1, 3}).ok());
  auto found = table.FindForMember(1, 3);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ((*found)->id, 1);
  EXPECT_EQ((*found)->RankOf(3), 1);
  found = table.FindForMember(0, 2);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->id, 0);

  auto outsider = table.FindForMember(1, 2);
  EXPECT_EQ(outsider.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(outsider.status().message(), "rank 2 is not a member of process set 1 [1, 3]");
  auto missing = table.FindForMember(7, 1);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message(), "process set 7 does not exist");
  ASSERT_TRUE(table.Remove(1).ok());
  EXPECT_EQ(table.FindForMember(1, 3).status().message(), "process set 1 does not exist");
}

}  // namespace
}  // namespace collective::daemon::job
