// daemon/coordinator: when a tensor becomes ready, in which order ready
// tensors come out, duplicate refusal, TakeAllPending and Describe.
#include "daemon/coordinator.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace collective::daemon {
namespace {

using ::testing::ElementsAre;
using Clock = std::chrono::steady_clock;

class CoordinatorTest : public ::testing::Test {
 protected:
  static constexpr int32_t kSize = 3;

  void SetUp() override {
    for (int32_t rank = 0; rank < kSize; ++rank) {
      auto client = std::make_unique<ClientRecord>();
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
    submission.request.set_request_id(request_id);
    submission.request.set_name(name);
    submission.request.set_collective(v1::COLLECTIVE_ALLREDUCE);
    submission.request.set_process_set_id(process_set);
    submission.at = at;
    return submission;
  }

  absl::Status Add(int32_t rank, const std::string& name, uint64_t request_id,
                   int32_t process_set = 0, Clock::time_point at = Clock::now()) {
    return coordinator_.Add(rank, Make(rank, name, request_id, process_set, at));
  }

  static std::vector<std::string> Names(const std::vector<ReadyTensor>& ready) {
    std::vector<std::string> names;
    for (const ReadyTensor& tensor : ready) names.push_back(tensor.name);
    return names;
  }

  std::vector<std::unique_ptr<ClientRecord>> clients_;
  Coordinator coordinator_{kSize};
};

TEST_F(CoordinatorTest, ReadyOnlyWhenEveryRankSubmitted) {
  EXPECT_TRUE(coordinator_.idle());
  ASSERT_TRUE(Add(2, "w", 1).ok());
  ASSERT_TRUE(Add(0, "w", 2).ok());
  EXPECT_TRUE(coordinator_.TakeReady().empty());
  EXPECT_FALSE(coordinator_.idle());
  ASSERT_TRUE(Add(1, "w", 3).ok());
  const std::vector<ReadyTensor> ready = coordinator_.TakeReady();
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
  Coordinator single(1);
  Submission submission = Make(0, "solo", 9);
  ASSERT_TRUE(single.Add(0, std::move(submission)).ok());
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
  const std::vector<ReadyTensor> ready = coordinator_.TakeReady();
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
  const std::vector<ReadyTensor> ready = coordinator_.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].submissions[0].request.process_set_id(), 1);
}

TEST_F(CoordinatorTest, TakeAllPendingReturnsPartialAndUntakenReadyTensors) {
  ASSERT_TRUE(Add(0, "partial", 1).ok());
  ASSERT_TRUE(Add(2, "partial", 2).ok());
  for (int32_t rank = 0; rank < kSize; ++rank) ASSERT_TRUE(Add(rank, "ready", 10 + rank).ok());
  std::vector<PendingTensor> pending = coordinator_.TakeAllPending();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_TRUE(coordinator_.idle());
  EXPECT_TRUE(coordinator_.TakeReady().empty());
  std::sort(pending.begin(), pending.end(),
            [](const PendingTensor& a, const PendingTensor& b) { return a.name < b.name; });
  const PendingTensor& partial = pending[0];
  EXPECT_EQ(partial.name, "partial");
  EXPECT_EQ(partial.submitted, 2);
  ASSERT_EQ(partial.by_rank.size(), 3u);
  EXPECT_TRUE(partial.by_rank[0].has_value());
  EXPECT_FALSE(partial.by_rank[1].has_value());
  EXPECT_EQ(partial.by_rank[2]->request.request_id(), 2u);
  const PendingTensor& ready = pending[1];
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

TEST_F(CoordinatorTest, DescribeListsOldestFirstWithReadyAndMissingRanks) {
  const Clock::time_point now = Clock::now();
  ASSERT_TRUE(Add(1, "young", 1, 0, now - std::chrono::seconds(1)).ok());
  ASSERT_TRUE(Add(0, "old", 2, 0, now - std::chrono::seconds(5)).ok());
  ASSERT_TRUE(Add(2, "old", 3, 0, now - std::chrono::seconds(2)).ok());
  google::protobuf::RepeatedPtrField<v1::PendingTensor> described;
  coordinator_.Describe(now, &described);
  ASSERT_EQ(described.size(), 2);
  EXPECT_EQ(described[0].name(), "old");
  EXPECT_EQ(described[0].collective(), v1::COLLECTIVE_ALLREDUCE);
  EXPECT_THAT(described[0].ready_ranks(), ElementsAre(0, 2));
  EXPECT_THAT(described[0].missing_ranks(), ElementsAre(1));
  EXPECT_NEAR(described[0].age_seconds(), 5.0, 0.01) << "age counts from the first submission";
  EXPECT_EQ(described[1].name(), "young");
  EXPECT_THAT(described[1].ready_ranks(), ElementsAre(1));
  EXPECT_THAT(described[1].missing_ranks(), ElementsAre(0, 2));
  EXPECT_NEAR(described[1].age_seconds(), 1.0, 0.01);
}

}  // namespace
}  // namespace collective::daemon
