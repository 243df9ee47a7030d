// daemon/coordinator: when a tensor becomes ready, in which order ready
// tensors come out, duplicate refusal, join, groups, TakeAllPending and
// Describe.
#include "daemon/negotiation/coordinator.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace collective::daemon::negotiation {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;
using Clock = std::chrono::steady_clock;

class CoordinatorTest : public ::testing::Test {
 protected:
  static constexpr int32_t kSize = 3;

  void SetUp() override {
    for (int32_t rank = 0; rank < kSize; ++rank) {
      auto client = std::make_unique<job::ClientRecord>();
      client->id = 100 + rank;
      client->local_rank = rank;
      client->topology.set_rank(rank);
      client->topology.set_size(kSize);
      clients_.push_back(std::move(client));
    }
  }

  Submission Make(int32_t rank, const std::string& name, uint64_t request_id,
                  int32_t process_set = 0, Clock::time_point at = Clock::now()) {
    Submission submission;
    submission.client = clients_[rank].get();
    submission.rank = submission.client->topology.rank();
    submission.set_rank = rank;
    submission.request.set_request_id(request_id);
    submission.request.set_name(name);
    submission.request.set_collective(v1::COLLECTIVE_ALLREDUCE);
    submission.request.set_process_set_id(process_set);
    submission.at = at;
    return submission;
  }

  absl::Status Add(int32_t rank, const std::string& name, uint64_t request_id,
                   int32_t process_set = 0, Clock::time_point at = Clock::now()) {
    return coordinator_.Add(Make(rank, name, request_id, process_set, at), kSize);
  }

  static std::vector<std::string> Names(const std::vector<ReadyTensor>& ready) {
    std::vector<std::string> names;
    for (const ReadyTensor& tensor : ready) names.push_back(tensor.name);
    return names;
  }

  std::vector<std::unique_ptr<job::ClientRecord>> clients_;
  Coordinator coordinator_;
};

TEST_F(CoordinatorTest, ReadyOnlyWhenEveryRankSubmitted) {
  EXPECT_TRUE(coordinator_.idle());
  ASSERT_TRUE(Add(2, "w", 1).ok());
  ASSERT_TRUE(Add(0, "w", 2).ok());
  EXPECT_TRUE(coordinator_.TakeReady().empty());
  EXPECT_FALSE(coordinator_.idle());
  ASSERT_TRUE(Add(1, "w", 3).ok());
  const std::vector<negotiation::ReadyTensor> ready = coordinator_.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].name, "w");
  // In rank order, whatever the order of submission.
  ASSERT_EQ(ready[0].submissions.size(), 3u);
  for (int32_t rank = 0; rank < kSize; ++rank) {
    EXPECT_EQ(ready[0].submissions[rank].client, clients_[rank].get());
  }
  EXPECT_EQ(ready[0].submissions[0].request.request_id(), 2u);
  EXPECT_EQ(ready[0].submissions[1].request.request_id(), 3u);
  EXPECT_EQ(ready[0].submissions[2].request.request_id(), 1u);
  EXPECT_TRUE(coordinator_.TakeReady().empty()) << "TakeReady empties the ready list";
  EXPECT_TRUE(coordinator_.idle());
}

TEST_F(CoordinatorTest, ReadyTensorsComeOutInTheOrderTheyBecameReady) {
  for (const char* name : {"a", "b", "c"}) ASSERT_TRUE(Add(0, name, 1).ok());
  for (const char* name : {"c", "a", "b"}) ASSERT_TRUE(Add(1, name, 1).ok());
  ASSERT_TRUE(Add(2, "b", 1).ok());
  ASSERT_TRUE(Add(2, "c", 1).ok());
  ASSERT_TRUE(Add(2, "a", 1).ok());
  EXPECT_THAT(Names(coordinator_.TakeReady()), ElementsAre("b", "c", "a"));
}

TEST_F(CoordinatorTest, SingleRankJobIsReadyAtOnce) {
  negotiation::Coordinator single;
  negotiation::Submission submission = Make(0, "solo", 9);
  ASSERT_TRUE(single.Add(std::move(submission), 1).ok());
  EXPECT_THAT(Names(single.TakeReady()), ElementsAre("solo"));
}

TEST_F(CoordinatorTest, RefusesADuplicateOutstandingNameOnOneRank) {
  ASSERT_TRUE(Add(0, "w", 1).ok());
  ASSERT_TRUE(Add(1, "w", 2).ok());
  const absl::Status status = Add(0, "w", 5);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(status.message(),
            "tensor 'w' is already outstanding on rank 0 (request 1); a name can be submitted "
            "again only after its collective has completed");
  // The first submission is untouched: the tensor completes with it.
  ASSERT_TRUE(Add(2, "w", 3).ok());
  const std::vector<negotiation::ReadyTensor> ready = coordinator_.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].submissions[0].request.request_id(), 1u);
}

TEST_F(CoordinatorTest, ANameCanBeSubmittedAgainOnceReady) {
  for (int32_t rank = 0; rank < kSize; ++rank) ASSERT_TRUE(Add(rank, "w", 1).ok());
  ASSERT_TRUE(Add(0, "w", 2).ok()) << "the first 'w' is ready, not outstanding in the table";
  EXPECT_EQ(coordinator_.TakeReady().size(), 1u);
  EXPECT_FALSE(coordinator_.idle());
}

TEST_F(CoordinatorTest, ProcessSetsKeepSeparateTables) {
  ASSERT_TRUE(Add(0, "w", 1, /*process_set=*/0).ok());
  ASSERT_TRUE(Add(0, "w", 2, /*process_set=*/1).ok()) << "same name, other process set";
  ASSERT_TRUE(Add(1, "w", 3, 1).ok());
  ASSERT_TRUE(Add(2, "w", 4, 1).ok());
  const std::vector<negotiation::ReadyTensor> ready = coordinator_.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].submissions[0].request.process_set_id(), 1);
}

TEST_F(CoordinatorTest, TakeAllPendingReturnsPartialAndUntakenReadyTensors) {
  ASSERT_TRUE(Add(0, "partial", 1).ok());
  ASSERT_TRUE(Add(2, "partial", 2).ok());
  for (int32_t rank = 0; rank < kSize; ++rank) ASSERT_TRUE(Add(rank, "ready", 10 + rank).ok());
  std::vector<negotiation::PendingTensor> pending = coordinator_.TakeAllPending();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_TRUE(coordinator_.idle());
  EXPECT_TRUE(coordinator_.TakeReady().empty());
  std::sort(pending.begin(), pending.end(),
            [](const negotiation::PendingTensor& a, const negotiation::PendingTensor& b) {
              return a.name < b.name;
            });
  const negotiation::PendingTensor& partial = pending[0];
  EXPECT_EQ(partial.name, "partial");
  EXPECT_EQ(partial.submitted, 2);
  ASSERT_EQ(partial.by_rank.size(), 3u);
  EXPECT_TRUE(partial.by_rank[0].has_value());
  EXPECT_FALSE(partial.by_rank[1].has_value());
  EXPECT_EQ(partial.by_rank[2]->request.request_id(), 2u);
  const negotiation::PendingTensor& ready = pending[1];
  EXPECT_EQ(ready.name, "ready");
  EXPECT_EQ(ready.submitted, 3);
  ASSERT_EQ(ready.by_rank.size(), 3u);
  for (int32_t rank = 0; rank < kSize; ++rank) {
    ASSERT_TRUE(ready.by_rank[rank].has_value());
    EXPECT_EQ(ready.by_rank[rank]->request.request_id(), 10u + rank);
  }
  // The table is really empty: a name can be submitted afresh.
  EXPECT_TRUE(Add(0, "partial", 3).ok());
}

TEST_F(CoordinatorTest, WaitingListsOldestFirstWithReadyAndMissingRanks) {
  const Clock::time_point now = Clock::now();
  ASSERT_TRUE(Add(1, "young", 1, 0, now - std::chrono::seconds(1)).ok());
  ASSERT_TRUE(Add(0, "old", 2, 0, now - std::chrono::seconds(5)).ok());
  ASSERT_TRUE(Add(2, "old", 3, 0, now - std::chrono::seconds(2)).ok());
  const std::vector<negotiation::WaitingTensor> waiting =
      coordinator_.Waiting(job::ProcessSetTable(kSize), [](int32_t) { return true; });
  ASSERT_EQ(waiting.size(), 2u);
  EXPECT_EQ(waiting[0].name, "old");
  EXPECT_EQ(waiting[0].collective, v1::COLLECTIVE_ALLREDUCE);
  EXPECT_THAT(waiting[0].ready_ranks, ElementsAre(0, 2));
  EXPECT_THAT(waiting[0].missing_ranks, ElementsAre(1));
  EXPECT_EQ(waiting[0].first_at, now - std::chrono::seconds(5))
      << "age counts from the first submission";
  EXPECT_FALSE(waiting[0].across_nodes);
  EXPECT_EQ(waiting[1].name, "young");
  EXPECT_THAT(waiting[1].ready_ranks, ElementsAre(1));
  EXPECT_THAT(waiting[1].missing_ranks, ElementsAre(0, 2));
}

TEST_F(CoordinatorTest, AcrossNodesOnlyLocalRanksAreMissingHere) {
  // Ranks 0 and 1 live here, rank 2 on another node: the tensor is ready
  // here once ranks 0 and 1 submitted it, and until then only rank 1 is
  // missing here (node 0 knows about rank 2).
  ASSERT_TRUE(coordinator_.Add(Make(0, "t", 1, 0, Clock::now()), kSize, 2).ok());
  const std::vector<negotiation::WaitingTensor> waiting =
      coordinator_.Waiting(job::ProcessSetTable(kSize), [](int32_t rank) { return rank < 2; });
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_THAT(waiting[0].missing_ranks, ElementsAre(1));
  EXPECT_TRUE(coordinator_.TakeReady().empty());
  ASSERT_TRUE(coordinator_.Add(Make(1, "t", 2, 0, Clock::now()), kSize, 2).ok());
  const std::vector<negotiation::ReadyTensor> ready = coordinator_.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].submissions.size(), 2u);
}

TEST_F(CoordinatorTest, AcrossNodesALocalJoinedRankCountsAsSubmitted) {
  // Ranks 0 and 1 here, rank 2 elsewhere; rank 1 joined: rank 0's
  // submission makes the tensor ready here.
  negotiation::Submission join = Make(1, "join", 1);
  join.request.set_collective(v1::COLLECTIVE_JOIN);
  ASSERT_TRUE(coordinator_.Add(std::move(join), kSize, 2).ok());
  coordinator_.Join(0, 1, kSize);
  ASSERT_TRUE(coordinator_.Add(Make(0, "t", 2, 0, Clock::now()), kSize, 2).ok());
  const std::vector<negotiation::ReadyTensor> ready = coordinator_.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].name, "t");
  EXPECT_EQ(ready[0].submissions.size(), 1u);
}

TEST_F(CoordinatorTest, JoinedRanksNoLongerHoldOthersUp) {
  ASSERT_TRUE(Add(0, "w", 1).ok());
  coordinator_.Join(0, 2, kSize);
  EXPECT_TRUE(coordinator_.TakeReady().empty()) << "rank 1 has neither submitted nor joined";
  ASSERT_TRUE(Add(1, "w", 2).ok());
  const std::vector<negotiation::ReadyTensor> ready = coordinator_.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].has_joined_ranks());
  EXPECT_EQ(ready[0].submissions.size(), 2u);
  EXPECT_EQ(ready[0].set_size, kSize);
}

TEST_F(CoordinatorTest, AJoinReleasesWhatWaitedOnlyForTheJoiningRank) {
  ASSERT_TRUE(Add(0, "w", 1).ok());
  ASSERT_TRUE(Add(1, "w", 2).ok());
  coordinator_.Join(0, 2, kSize);
  const std::vector<negotiation::ReadyTensor> ready = coordinator_.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].completed_by, 2);
  EXPECT_THAT(coordinator_.Joined(0), ElementsAre(2));
  coordinator_.EndJoin(0);
  EXPECT_TRUE(coordinator_.Joined(0).empty());
}

// Horovod's rule: once a rank of a set joined, the set's collectives other
// than allreduce and join fail at once on every rank that submits them, and
// those already waiting fail with them (with the rest of their groups), with
// no wait for the other ranks: ranks may by then disagree on automatic names
// (the joined rank made fewer calls). Every refusal names the rank whose
// join began it, however many joined since; once the join is over, the set
// runs everything again.
TEST_F(CoordinatorTest, AfterAJoinOnlyAllreduceAndJoinWaitAndTheRestFailAtOnce) {
  const auto submit = [&](int32_t rank, const std::string& name, v1::Collective collective,
                          uint64_t group = 0) {
    negotiation::Submission submission = Make(rank, name, 10 + rank);
    submission.request.set_collective(collective);
    submission.request.set_group_id(group);
    submission.request.set_group_size(group == 0 ? 0 : 2);
    return coordinator_.Add(std::move(submission), kSize);
  };
  ASSERT_TRUE(submit(0, "gather.0", v1::COLLECTIVE_ALLGATHER).ok());
  ASSERT_TRUE(submit(1, "g.a", v1::COLLECTIVE_ALLGATHER, 5).ok());
  ASSERT_TRUE(submit(1, "g.b", v1::COLLECTIVE_ALLGATHER, 5).ok());
  ASSERT_TRUE(submit(0, "w", v1::COLLECTIVE_ALLREDUCE).ok());
  ASSERT_TRUE(submit(2, "__join", v1::COLLECTIVE_JOIN).ok());

  const std::string refused =
      " cannot run while rank 2 of process set 0 has joined: after a join "
      "only allreduce carries on";
  auto taken = coordinator_.RefuseAfterJoin(0, 2);
  coordinator_.Join(0, 2, kSize);
  std::vector<std::string> names;
  for (const auto& [tensor, why] : taken) {
    names.push_back(tensor.name);
    EXPECT_EQ(why.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(std::string(why.message()),
              absl::StrCat("allgather of '", tensor.name, "'", refused));
  }
  EXPECT_THAT(names, UnorderedElementsAre("gather.0", "g.a", "g.b"));
  EXPECT_TRUE(coordinator_.RefuseAfterJoin(0, 1).empty()) << "it refuses already";

  EXPECT_TRUE(submit(1, "w", v1::COLLECTIVE_ALLREDUCE).ok());
  const std::vector<ReadyTensor> ready = coordinator_.TakeReady();
  ASSERT_EQ(ready.size(), 1u) << "the allreduce waits for nobody but joined ranks";
  EXPECT_EQ(ready[0].name, "w");

  // Submitted after the join, under any name: refused at once, naming the
  // first rank to join even after another joined.
  ASSERT_TRUE(submit(1, "__join", v1::COLLECTIVE_JOIN).ok());
  coordinator_.Join(0, 1, kSize);
  absl::Status status = submit(0, "gather.1", v1::COLLECTIVE_ALLGATHER);
  EXPECT_EQ(status.message(), absl::StrCat("allgather of 'gather.1'", refused));
  status = submit(0, "__collective__.barrier", v1::COLLECTIVE_BARRIER);
  EXPECT_EQ(status.message(), absl::StrCat("barrier", refused));
  EXPECT_EQ(coordinator_.pending().size(), 1u) << "only the join waits";

  coordinator_.EndJoin(0);
  EXPECT_TRUE(submit(0, "gather.2", v1::COLLECTIVE_ALLGATHER).ok());
  EXPECT_TRUE(coordinator_.TakeReady().empty()) << "it waits for every rank again";
}

TEST_F(CoordinatorTest, JoinItselfWaitsForEveryRankAndNamesTheLast) {
  const auto join = [&](int32_t rank) {
    negotiation::Submission submission = Make(rank, "__join", 50 + rank);
    submission.request.set_collective(v1::COLLECTIVE_JOIN);
    ASSERT_TRUE(coordinator_.Add(std::move(submission), kSize).ok());
    coordinator_.Join(0, rank, kSize);
  };
  join(1);
  join(0);
  EXPECT_TRUE(coordinator_.TakeReady().empty());
  join(2);
  const std::vector<negotiation::ReadyTensor> ready = coordinator_.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].completed_by, 2) << "the last rank to join";
}

TEST_F(CoordinatorTest, AGroupComesOutTogetherOnceAllItsTensorsAreReady) {
  const auto add = [&](int32_t rank, const std::string& name, uint64_t group) {
    negotiation::Submission submission = Make(rank, name, 1);
    submission.request.set_group_id(group);
    submission.request.set_group_size(2);
    ASSERT_TRUE(coordinator_.Add(std::move(submission), kSize).ok());
  };
  for (int32_t rank = 0; rank < kSize; ++rank) add(rank, "g.a", 7);
  EXPECT_TRUE(coordinator_.TakeReady().empty()) << "half a group waits";
  ASSERT_TRUE(Add(0, "single", 9).ok());
  ASSERT_TRUE(Add(1, "single", 9).ok());
  ASSERT_TRUE(Add(2, "single", 9).ok());
  EXPECT_THAT(Names(coordinator_.TakeReady()), ElementsAre("single"));
  for (int32_t rank = 0; rank < kSize; ++rank) add(rank, "g.b", 7);
  EXPECT_THAT(Names(coordinator_.TakeReady()), ElementsAre("g.a", "g.b"));
}

TEST_F(CoordinatorTest, AJoinInOneSetDoesNotReleaseAnother) {
  ASSERT_TRUE(Add(0, "w", 1, /*process_set=*/1).ok());
  ASSERT_TRUE(Add(1, "w", 2, /*process_set=*/1).ok());
  coordinator_.Join(0, 2, kSize);
  EXPECT_TRUE(coordinator_.TakeReady().empty()) << "rank 2 joined set 0, not set 1";
  EXPECT_TRUE(coordinator_.Joined(1).empty());
  EXPECT_THAT(coordinator_.Joined(0), ElementsAre(2));
  ASSERT_TRUE(Add(0, "v", 3, /*process_set=*/0).ok());
  ASSERT_TRUE(Add(1, "v", 4, /*process_set=*/0).ok());
  EXPECT_THAT(Names(coordinator_.TakeReady()), ElementsAre("v"));
}

TEST_F(CoordinatorTest, TakePendingTakesOneSetWithItsGroupsReadyTensorsAndJoins) {
  ASSERT_TRUE(Add(0, "other", 1, /*process_set=*/0).ok());
  ASSERT_TRUE(Add(0, "partial", 2, /*process_set=*/1).ok());
  for (int32_t rank = 0; rank < kSize; ++rank) ASSERT_TRUE(Add(rank, "ready", 3, 1).ok());
  for (int32_t rank = 0; rank < kSize; ++rank) {
    negotiation::Submission submission = Make(rank, "half.group", 4, 1);
    submission.request.set_group_id(5);
    submission.request.set_group_size(2);
    ASSERT_TRUE(coordinator_.Add(std::move(submission), kSize).ok());
  }
  coordinator_.Join(1, 2, kSize);
  std::vector<negotiation::PendingTensor> taken = coordinator_.TakePending(1);
  std::sort(taken.begin(), taken.end(),
            [](const negotiation::PendingTensor& a, const negotiation::PendingTensor& b) {
              return a.name < b.name;
            });
  ASSERT_EQ(taken.size(), 3u);
  EXPECT_EQ(taken[0].name, "half.group");
  EXPECT_EQ(taken[0].submitted, 3);
  EXPECT_EQ(taken[1].name, "partial");
  EXPECT_EQ(taken[1].submitted, 1);
  EXPECT_EQ(taken[2].name, "ready");
  for (const negotiation::PendingTensor& tensor : taken) EXPECT_EQ(tensor.process_set_id, 1);
  EXPECT_TRUE(coordinator_.Joined(1).empty());
  EXPECT_TRUE(coordinator_.TakeReady().empty());
  // Set 0 is untouched.
  ASSERT_EQ(coordinator_.pending().size(), 1u);
  ASSERT_TRUE(Add(1, "other", 5).ok());
  ASSERT_TRUE(Add(2, "other", 6).ok());
  EXPECT_THAT(Names(coordinator_.TakeReady()), ElementsAre("other"));
  EXPECT_TRUE(coordinator_.idle());
}

TEST_F(CoordinatorTest, TakeAllPendingIncludesWaitingGroupsAndEndsJoins) {
  for (int32_t rank = 0; rank < kSize; ++rank) {
    negotiation::Submission submission = Make(rank, "g.a", 1);
    submission.request.set_group_id(5);
    submission.request.set_group_size(2);
    ASSERT_TRUE(coordinator_.Add(std::move(submission), kSize).ok());
  }
  coordinator_.Join(0, 1, kSize);
  EXPECT_FALSE(coordinator_.idle()) << "a group waits for its other tensor";
  const std::vector<negotiation::PendingTensor> pending = coordinator_.TakeAllPending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].name, "g.a");
  EXPECT_TRUE(coordinator_.idle());
  EXPECT_TRUE(coordinator_.Joined(0).empty());
}

TEST_F(CoordinatorTest, TakeTensorTakesOnlyWhatIsStillPending) {
  ASSERT_TRUE(Add(0, "w", 1).ok());
  for (int32_t rank = 0; rank < kSize; ++rank) ASSERT_TRUE(Add(rank, "ready", 2).ok());
  EXPECT_TRUE(coordinator_.TakeTensor(0, "ready").empty()) << "ready: not in the table";
  EXPECT_TRUE(coordinator_.TakeTensor(1, "w").empty()) << "another process set";
  const auto taken = coordinator_.TakeTensor(0, "w");
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].name, "w");
  EXPECT_EQ(taken[0].by_rank[0]->request.request_id(), 1u);
  EXPECT_TRUE(coordinator_.pending().empty());
  EXPECT_TRUE(Add(0, "w", 3).ok()) << "the name is free again";
}

// A group runs whole or not at all: taking one member takes the ready
// members waiting for it and the pending ones too, and leaves other groups.
TEST_F(CoordinatorTest, TakeTensorTakesTheRestOfItsGroup) {
  const auto add = [&](int32_t rank, const std::string& name, uint64_t group) {
    negotiation::Submission submission = Make(rank, name, 1);
    submission.request.set_group_id(group);
    submission.request.set_group_size(3);
    ASSERT_TRUE(coordinator_.Add(std::move(submission), kSize).ok());
  };
  for (int32_t rank = 0; rank < kSize; ++rank) add(rank, "g.ready", 7);
  add(0, "g.stalled", 7);
  add(1, "g.partly", 7);
  add(0, "other", 8);
  const auto taken = coordinator_.TakeTensor(0, "g.stalled");
  std::vector<std::string> names;
  for (const negotiation::PendingTensor& tensor : taken) names.push_back(tensor.name);
  EXPECT_THAT(names, UnorderedElementsAre("g.stalled", "g.partly", "g.ready"));
  ASSERT_EQ(coordinator_.pending().size(), 1u);
  EXPECT_EQ(coordinator_.pending().begin()->second.name, "other");
  EXPECT_TRUE(coordinator_.TakeReady().empty());
}

TEST_F(CoordinatorTest, WaitingNamesGlobalRanksAndLeavesJoinedRanksOut) {
  job::ProcessSetTable sets(kSize);
  ASSERT_TRUE(sets.Add(std::vector<int32_t>{0, 2}).ok());  // set 1
  const Clock::time_point now = Clock::now();
  // Global rank 2 is set rank 1 of set 1.
  negotiation::Submission submission =
      Make(2, "in.set", 1, /*process_set=*/1, now - std::chrono::seconds(2));
  submission.set_rank = 1;
  ASSERT_TRUE(coordinator_.Add(std::move(submission), 2).ok());
  ASSERT_TRUE(Add(0, "joined", 2, 0, now - std::chrono::seconds(1)).ok());
  coordinator_.Join(0, 2, kSize);
  const std::vector<negotiation::WaitingTensor> waiting =
      coordinator_.Waiting(sets, [](int32_t) { return true; });
  ASSERT_EQ(waiting.size(), 2u);
  EXPECT_EQ(waiting[0].name, "in.set");
  EXPECT_EQ(waiting[0].process_set_id, 1);
  EXPECT_THAT(waiting[0].ready_ranks, ElementsAre(2));
  EXPECT_THAT(waiting[0].missing_ranks, ElementsAre(0));
  EXPECT_EQ(waiting[1].name, "joined");
  EXPECT_THAT(waiting[1].ready_ranks, ElementsAre(0));
  EXPECT_THAT(waiting[1].missing_ranks, ElementsAre(1)) << "rank 2 has joined";
}

}  // namespace
}  // namespace collective::daemon::negotiation
