// Node 0's table of negotiation across nodes, driven as the negotiator
// drives it: every node's NodeReady in, decision batches out, each batch
// applied to the response cache as every node applies it.
#include "daemon/negotiation/global_table.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/negotiation/mismatch.h"

namespace collective::daemon::negotiation {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Two nodes of two ranks each: ranks 0-1 on node 0, 2-3 on node 1.
job::NodeLayout TwoByTwo() {
  return job::NodeLayout{.node = 0, .local_sizes = {2, 2}, .hosts = {}};
}

// Refuses tensors whose ranks disagree on the first dimension.
absl::Status SameShapes(const negotiation::ReadyTensor& everyone) {
  for (const negotiation::Submission& submission : everyone.submissions) {
    if (submission.request.shape(0) != everyone.submissions.front().request.shape(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Mismatched shapes for '", everyone.name, "'"));
    }
  }
  return absl::OkStatus();
}

// Stands in for the kernels' combination of small allreduces' parts: the
// parts joined by '+' in the order given, after the tensor's name; none when
// a part says "malformed".
std::optional<std::string> JoinParts(const std::vector<v1::RankRequest>& everyone,
                                     const std::vector<const std::string*>& parts) {
  std::string joined = everyone.front().request().name() + ":";
  for (const std::string* part : parts) {
    if (*part == "malformed") return std::nullopt;
    joined += (part == parts.front() ? "" : "+") + *part;
  }
  return joined;
}

class GlobalTableTest : public ::testing::Test {
 protected:
  GlobalTableTest()
      : sets_(4),
        cache_(8),
        bits_(8, 2),
        table_(TwoByTwo(), &SameShapes, cache_, bits_, &JoinParts) {}

  static v1::RankRequest Rank(int32_t rank, const std::string& name, int64_t rows,
                              uint64_t request_id = 1,
                              v1::Collective collective = v1::COLLECTIVE_ALLREDUCE) {
    v1::RankRequest ranked;
    ranked.set_set_rank(rank);
    ranked.set_rank(rank);
    v1::TensorRequest& request = *ranked.mutable_request();
    request.set_request_id(request_id);
    request.set_name(name);
    request.set_collective(collective);
    request.set_dtype(v1::DATA_TYPE_FLOAT32);
    request.add_shape(rows);
    return ranked;
  }

  // Node `node` announces `name` in full for its two ranks (but those that
  // joined, unless it is the join).
  void Announce(int node, const std::string& name, int64_t rows = 3, int64_t other_rows = -1,
                v1::Collective collective = v1::COLLECTIVE_ALLREDUCE) {
    v1::NodeReady ready;
    v1::NodeTensor& tensor = *ready.add_tensors();
    tensor.set_name(name);
    for (int32_t rank : {2 * node, 2 * node + 1}) {
      if (joined_[rank] && collective != v1::COLLECTIVE_JOIN) continue;
      const int64_t own = rank == 2 * node + 1 && other_rows >= 0 ? other_rows : rows;
      *tensor.add_ranks() = Rank(rank, name, own, 1, collective);
    }
    table_.Take(node, ready, sets_, Clock::now());
  }

  // Node `node` announces the tensors cached at `bits`, with `parts` of
  // small allreduces (by bit).
  void AnnounceBits(int node, const std::vector<uint32_t>& bits,
                    const std::map<uint32_t, std::string>& parts = {}) {
    v1::NodeReady ready;
    ready.set_cache_bits(negotiation::PackBits(bits));
    for (const auto& [bit, part] : parts) {
      v1::NodeReduction& reduction = *ready.add_reductions();
      reduction.set_cache_bit(bit);
      reduction.set_data(part);
    }
    table_.Take(node, ready, sets_, Clock::now());
  }

  void Join(int node, int32_t rank) {
    joined_[rank] = true;
    v1::NodeReady ready;
    v1::JoinedRank& joined = *ready.add_joined();
    joined.set_process_set_id(0);
    joined.set_set_rank(rank);
    joined.set_rank(rank);
    table_.Take(node, ready, sets_, Clock::now());
  }

  // The next batch, applied to the cache and acknowledged by both nodes.
  v1::Decisions Batch() {
    std::optional<v1::Decisions> batch = table_.TakeBatch();
    if (!batch.has_value()) return {};
    cache_.Apply(*batch);
    ++applied_;
    bits_.Acknowledge(0, applied_);
    bits_.Acknowledge(1, applied_);
    return *batch;
  }

  // `name` announced in full by both nodes and decided: its cache bit.
  uint32_t Cached(const std::string& name) {
    Announce(0, name);
    Announce(1, name);
    return Batch().decisions(0).cache_bit();
  }

  static std::vector<std::string> Names(const v1::Decisions& batch) {
    std::vector<std::string> names;
    for (const v1::Decision& decision : batch.decisions()) names.push_back(decision.name());
    return names;
  }

  job::ProcessSetTable sets_;
  negotiation::ResponseCache cache_;
  negotiation::CacheBits bits_;
  negotiation::GlobalTable table_;
  uint64_t applied_ = 0;
  bool joined_[4] = {};
};

TEST_F(GlobalTableTest, DecidesOnceEveryNodeAnnouncedAndCachesTheTensor) {
  Announce(0, "w");
  EXPECT_EQ(table_.TakeBatch(), std::nullopt) << "node 1's ranks have not submitted";
  Announce(1, "w");
  const v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  const v1::Decision& decision = batch.decisions(0);
  EXPECT_EQ(decision.code(), 0) << decision.message();
  EXPECT_EQ(decision.ranks_size(), 4);
  EXPECT_FALSE(decision.from_cache());
  EXPECT_TRUE(decision.cache_put());
  EXPECT_EQ(cache_.BitOf({0, "w"}), decision.cache_bit());
  EXPECT_EQ(table_.counters().decided_in_full, 1u);
}

TEST_F(GlobalTableTest, ASteadyStateStepIsDecidedFromTheCacheBitsAlone) {
  const uint32_t bit = Cached("w");
  AnnounceBits(0, {bit});
  EXPECT_EQ(table_.TakeBatch(), std::nullopt) << "the AND of the nodes' bits is still 0";
  AnnounceBits(1, {bit});
  const v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_TRUE(batch.decisions(0).from_cache());
  EXPECT_EQ(batch.decisions(0).cache_bit(), bit);
  EXPECT_THAT(batch.decisions(0).ranks(), IsEmpty()) << "no request travels";
  EXPECT_EQ(table_.counters().decided_from_cache, 1u);
  EXPECT_EQ(table_.counters().decided_in_full, 1u);
}

TEST_F(GlobalTableTest, EveryNodesPartOfASmallAllreduceIsCombinedInNodeOrderAsItIsDecided) {
  const uint32_t bit = Cached("w");
  AnnounceBits(1, {bit}, {{bit, "one"}});
  AnnounceBits(0, {bit}, {{bit, "zero"}});
  const v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_TRUE(batch.decisions(0).from_cache());
  ASSERT_TRUE(batch.decisions(0).has_combined());
  EXPECT_EQ(batch.decisions(0).combined(), "w:zero+one");
  EXPECT_EQ(table_.counters().decided_combined, 1u);
  EXPECT_EQ(table_.counters().decided_from_cache, 1u);
}

TEST_F(GlobalTableTest, ANodeThatSentNoPartLeavesTheCombinationToTheNodes) {
  const uint32_t bit = Cached("w");
  AnnounceBits(0, {bit}, {{bit, "zero"}});
  AnnounceBits(1, {bit});  // e.g. its cross_node_inline_bytes is smaller
  const v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_TRUE(batch.decisions(0).from_cache());
  EXPECT_FALSE(batch.decisions(0).has_combined());
  EXPECT_EQ(table_.counters().decided_combined, 0u);
}

TEST_F(GlobalTableTest, PartsThatCannotBeCombinedLeaveTheCombinationToTheNodes) {
  const uint32_t bit = Cached("w");
  AnnounceBits(0, {bit}, {{bit, "zero"}});
  AnnounceBits(1, {bit}, {{bit, "malformed"}});
  const v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_TRUE(batch.decisions(0).from_cache());
  EXPECT_FALSE(batch.decisions(0).has_combined());
}

TEST_F(GlobalTableTest, APartCountsForItsOwnStepOnly) {
  const uint32_t bit = Cached("w");
  AnnounceBits(0, {bit}, {{bit, "zero"}});
  AnnounceBits(1, {bit}, {{bit, "one"}});
  EXPECT_EQ(Batch().decisions(0).combined(), "w:zero+one");
  AnnounceBits(0, {bit});
  AnnounceBits(1, {bit}, {{bit, "again"}});
  const v1::Decisions next = Batch();
  ASSERT_EQ(next.decisions_size(), 1);
  EXPECT_FALSE(next.decisions(0).has_combined()) << "node 0's part of the last step is gone";
}

// A node that combined a step from every node's part (PeerPart) may announce
// the next step before another node's announcement of this one arrives.
TEST_F(GlobalTableTest, ANodesNextStepThatComesAheadWaitsForThePendingStepsDecision) {
  const uint32_t bit = Cached("w");
  AnnounceBits(1, {bit}, {{bit, "one"}});
  AnnounceBits(1, {bit}, {{bit, "one again"}});
  EXPECT_EQ(table_.TakeBatch(), std::nullopt) << "node 0 announced neither step";
  AnnounceBits(0, {bit}, {{bit, "zero"}});
  const v1::Decisions first = Batch();
  ASSERT_EQ(first.decisions_size(), 1);
  EXPECT_EQ(first.decisions(0).combined(), "w:zero+one");
  const std::vector<WaitingTensor> waiting = table_.Waiting(sets_, Clock::now());
  ASSERT_EQ(waiting.size(), 1u) << "node 1's next step waits for node 0's";
  EXPECT_THAT(waiting.front().ready_ranks, ElementsAre(2, 3));
  EXPECT_THAT(waiting.front().missing_ranks, ElementsAre(0, 1));
  AnnounceBits(0, {bit}, {{bit, "zero again"}});
  const v1::Decisions second = Batch();
  ASSERT_EQ(second.decisions_size(), 1);
  EXPECT_EQ(second.decisions(0).combined(), "w:zero again+one again");
  EXPECT_THAT(table_.Waiting(sets_, Clock::now()), IsEmpty());
}

TEST_F(GlobalTableTest, EndAllAlsoFailsAnAnnouncementThatCameAhead) {
  const uint32_t bit = Cached("w");
  AnnounceBits(1, {bit}, {{bit, "one"}});
  AnnounceBits(1, {bit}, {{bit, "one again"}});
  table_.EndAll(absl::UnavailableError("rank 0 died"));
  const v1::Decisions batch = Batch();
  EXPECT_THAT(Names(batch), ElementsAre("w", "w")) << "the pending step, then the one ahead";
  for (const v1::Decision& decision : batch.decisions()) {
    EXPECT_EQ(decision.message(), "rank 0 died");
    EXPECT_EQ(decision.ranks_size(), 2) << "node 1's ranks";
  }
}

// Every node announced the step by the bit, and a node that combined it
// from the parts ran it so: node 0 decides it from the entry even after
// evicting it, which no node can have reused yet.
TEST_F(GlobalTableTest, AStepAnnouncedByABitEvictedMeanwhileIsStillDecidedFromIt) {
  const uint32_t bit = Cached("w");
  AnnounceBits(0, {bit}, {{bit, "zero"}});
  for (int i = 0; i < 8; ++i) Cached(absl::StrCat("x", i));  // the last one evicts w
  ASSERT_EQ(cache_.BitOf({0, "w"}), std::nullopt) << "w's entry should have been evicted";
  AnnounceBits(1, {bit}, {{bit, "one"}});
  const v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_TRUE(batch.decisions(0).from_cache());
  EXPECT_EQ(batch.decisions(0).cache_bit(), bit);
  EXPECT_EQ(batch.decisions(0).combined(), "w:zero+one");
}

TEST_F(GlobalTableTest, APartWithATensorAnnouncedInFullIsNotCombined) {
  const uint32_t bit = Cached("w");
  AnnounceBits(0, {bit}, {{bit, "zero"}});
  Announce(1, "w");
  const v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_FALSE(batch.decisions(0).from_cache());
  EXPECT_FALSE(batch.decisions(0).has_combined());
}

TEST_F(GlobalTableTest, ANodeAnnouncingInFullWhileOthersUseTheBitDecidesInFull) {
  const uint32_t bit = Cached("w");
  AnnounceBits(0, {bit});
  Announce(1, "w");  // e.g. its cache lagged
  const v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_FALSE(batch.decisions(0).from_cache());
  EXPECT_EQ(batch.decisions(0).ranks_size(), 4);
  EXPECT_EQ(cache_.BitOf({0, "w"}), bit) << "same requests: the entry stays";
}

TEST_F(GlobalTableTest, ChangedParametersRetireTheEntryAndCacheTheNewOnes) {
  Announce(0, "w", 3);
  Announce(1, "w", 3);
  const uint32_t old_bit = Batch().decisions(0).cache_bit();
  Announce(0, "w", 5);
  Announce(1, "w", 5);
  const v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_THAT(batch.decisions(0).retire_bits(), ElementsAre(old_bit));
  EXPECT_TRUE(batch.decisions(0).cache_put());
  const std::optional<uint32_t> now = cache_.BitOf({0, "w"});
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(cache_.At(*now)->ranks.front().request().shape(0), 5);
}

TEST_F(GlobalTableTest, AMismatchFailsOnEveryRankAndIsNotCached) {
  Announce(0, "w", 3);
  Announce(1, "w", 3, /*other_rows=*/4);
  const v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_EQ(batch.decisions(0).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(batch.decisions(0).message(), HasSubstr("Mismatched shapes for 'w'"));
  EXPECT_EQ(batch.decisions(0).ranks_size(), 4) << "every rank gets the error";
  EXPECT_FALSE(batch.decisions(0).cache_put());
  EXPECT_EQ(cache_.BitOf({0, "w"}), std::nullopt);
}

TEST_F(GlobalTableTest, DecisionsComeInTheOrderTensorsBecameReadyEverywhere) {
  Announce(0, "a");
  Announce(0, "b");
  Announce(1, "b");
  Announce(1, "a");
  EXPECT_THAT(Names(Batch()), ElementsAre("b", "a"));
}

TEST_F(GlobalTableTest, TensorsReadyTogetherComeInTheOrderTheyWereFirstAnnounced) {
  Announce(0, "a");
  Announce(0, "b");
  v1::NodeReady ready;  // node 1's ranks submitted both since its last report
  for (const char* name : {"b", "a"}) {
    v1::NodeTensor& tensor = *ready.add_tensors();
    tensor.set_name(name);
    *tensor.add_ranks() = Rank(2, name, 3);
    *tensor.add_ranks() = Rank(3, name, 3);
  }
  table_.Take(1, ready, sets_, Clock::now());
  EXPECT_THAT(Names(Batch()), ElementsAre("a", "b"));
}

TEST_F(GlobalTableTest, JoinedRanksNoLongerHoldAllreduceUpAndItIsNotCached) {
  Join(1, 2);
  Join(1, 3);
  ASSERT_EQ(Batch().decisions_size(), 1) << "the news that the join began";
  Announce(0, "w");
  const v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_EQ(batch.decisions(0).code(), 0);
  EXPECT_EQ(batch.decisions(0).ranks_size(), 2) << "joined ranks are absent";
  EXPECT_FALSE(batch.decisions(0).cache_put());
}

// Horovod's rule across nodes: once a rank joined, node 0 refuses every
// collective of the set but allreduce and join as soon as any node announces
// it (the ranks still at work may disagree on its automatic name, so it must
// not wait for them), tells every node so that they refuse such submissions
// themselves, and names the rank that joined first whoever joins after.
TEST_F(GlobalTableTest, AfterAJoinEveryNodeHearsItAndOnlyAllreduceWaits) {
  Announce(0, "gather.waiting", 3, -1, v1::COLLECTIVE_ALLGATHER);
  EXPECT_EQ(table_.TakeBatch(), std::nullopt);
  Join(1, 3);
  v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 2);
  EXPECT_TRUE(batch.decisions(0).join_began());
  EXPECT_EQ(batch.decisions(0).process_set_id(), 0);
  EXPECT_EQ(batch.decisions(0).first_joined(), 3);
  const std::string refused =
      " cannot run while rank 3 of process set 0 has joined: after a join "
      "only allreduce carries on";
  EXPECT_EQ(batch.decisions(1).name(), "gather.waiting");
  EXPECT_EQ(batch.decisions(1).code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(batch.decisions(1).message(), "allgather of 'gather.waiting'" + refused);
  EXPECT_EQ(batch.decisions(1).ranks_size(), 2) << "node 0's ranks hear it";

  // Announced after the join, by one node only, under names the others
  // never use: refused at once. A later join names the first rank still.
  Join(0, 1);
  Announce(1, "barrier.one", 3, -1, v1::COLLECTIVE_BARRIER);
  Announce(0, "gather.zero", 3, -1, v1::COLLECTIVE_ALLGATHER);
  Announce(0, "w");
  batch = Batch();
  EXPECT_THAT(Names(batch), ElementsAre("barrier.one", "gather.zero"));
  EXPECT_EQ(batch.decisions(0).message(), "barrier" + refused);
  EXPECT_EQ(batch.decisions(1).message(), "allgather of 'gather.zero'" + refused);
  Announce(1, "w");
  EXPECT_THAT(Names(Batch()), ElementsAre("w")) << "allreduce waits and runs";

  // Once the join completes, the set runs everything again.
  for (int node : {0, 1}) Announce(node, "join", 3, -1, v1::COLLECTIVE_JOIN);
  batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_EQ(batch.decisions(0).code(), 0);
  Announce(0, "gather.after", 3, -1, v1::COLLECTIVE_ALLGATHER);
  EXPECT_EQ(table_.TakeBatch(), std::nullopt) << "waits for node 1 again";
}

TEST_F(GlobalTableTest, FailAndEndAllFailWaitingTensorsAndEverythingAnnouncedLater) {
  Announce(0, "stalled");
  EXPECT_TRUE(table_.Fail(0, "stalled", absl::DeadlineExceededError("stalled for 60 s")));
  EXPECT_FALSE(table_.Fail(0, "stalled", absl::DeadlineExceededError("again")));
  v1::Decisions batch = Batch();
  ASSERT_EQ(batch.decisions_size(), 1);
  EXPECT_EQ(batch.decisions(0).code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(batch.decisions(0).ranks_size(), 2);

  Announce(0, "pending");
  table_.EndAll(absl::UnavailableError("rank 3 died"));
  Announce(1, "later");
  batch = Batch();
  EXPECT_THAT(Names(batch), ElementsAre("pending", "later"));
  for (const v1::Decision& decision : batch.decisions()) {
    EXPECT_EQ(decision.message(), "rank 3 died");
  }
}

// A grouped tensor that one node announces from the cache and the other in
// full (a node whose rank joined announces in full) is still one group of the
// same size on every rank, whatever each client's id for its group: the
// real agreement check (mismatch.h) must pass it.
TEST(GlobalTableAgreementTest, ACachedGroupAgreesWithTheSameGroupAnnouncedInFull) {
  const job::ProcessSetTable sets(4);
  negotiation::ResponseCache cache(8);
  negotiation::CacheBits bits(8, 2);
  negotiation::GlobalTable table(TwoByTwo(), &negotiation::CheckAgreement, cache, bits);
  const auto announce = [&](int node, uint64_t group_id) {
    v1::NodeReady ready;
    v1::NodeTensor& tensor = *ready.add_tensors();
    tensor.set_name("g");
    for (int32_t rank : {2 * node, 2 * node + 1}) {
      v1::RankRequest& ranked = *tensor.add_ranks();
      ranked.set_set_rank(rank);
      ranked.set_rank(rank);
      v1::TensorRequest& request = *ranked.mutable_request();
      request.set_request_id(group_id);
      request.set_name("g");
      request.set_collective(v1::COLLECTIVE_ALLREDUCE);
      request.set_dtype(v1::DATA_TYPE_FLOAT32);
      request.add_shape(3);
      request.set_group_id(group_id + static_cast<uint64_t>(rank));
      request.set_group_size(2);
    }
    table.Take(node, ready, sets, Clock::now());
  };
  announce(0, 10);
  announce(1, 20);
  std::optional<v1::Decisions> first = table.TakeBatch();
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->decisions_size(), 1);
  ASSERT_EQ(first->decisions(0).code(), 0) << first->decisions(0).message();
  ASSERT_TRUE(first->decisions(0).cache_put());
  cache.Apply(*first);
  bits.Acknowledge(0, 1);
  bits.Acknowledge(1, 1);

  v1::NodeReady from_cache;
  from_cache.set_cache_bits(negotiation::PackBits({first->decisions(0).cache_bit()}));
  table.Take(0, from_cache, sets, Clock::now());
  announce(1, 30);
  std::optional<v1::Decisions> second = table.TakeBatch();
  ASSERT_TRUE(second.has_value());
  ASSERT_EQ(second->decisions_size(), 1);
  EXPECT_EQ(second->decisions(0).code(), 0) << second->decisions(0).message();
  EXPECT_FALSE(second->decisions(0).from_cache()) << "node 1 announced in full";
}

// Node 0's checks see how the set lies on the nodes (Adasum across nodes
// needs as many ranks on every node): refused here unless it is 2 + 2.
absl::Status SpanIsTwoByTwo(const negotiation::ReadyTensor& everyone) {
  if (everyone.span == nullptr) return absl::InternalError("no span");
  const job::SetSpan& span = *everyone.span;
  if (span.count != std::vector<int32_t>{2, 2} || span.first != std::vector<int32_t>{0, 2}) {
    return absl::InternalError(absl::StrCat("span counts ", absl::StrJoin(span.count, ",")));
  }
  return absl::OkStatus();
}

TEST(GlobalTableSpanTest, TheChecksSeeHowTheSetLiesOnTheNodes) {
  const job::ProcessSetTable sets(4);
  negotiation::ResponseCache cache(8);
  negotiation::CacheBits bits(8, 2);
  negotiation::GlobalTable table(TwoByTwo(), &SpanIsTwoByTwo, cache, bits);
  for (int node : {0, 1}) {
    v1::NodeReady ready;
    v1::NodeTensor& tensor = *ready.add_tensors();
    tensor.set_name("w");
    for (int32_t rank : {2 * node, 2 * node + 1}) {
      v1::RankRequest& ranked = *tensor.add_ranks();
      ranked.set_set_rank(rank);
      ranked.set_rank(rank);
      ranked.mutable_request()->set_name("w");
      ranked.mutable_request()->set_collective(v1::COLLECTIVE_ALLREDUCE);
    }
    table.Take(node, ready, sets, Clock::now());
  }
  std::optional<v1::Decisions> batch = table.TakeBatch();
  ASSERT_TRUE(batch.has_value());
  ASSERT_EQ(batch->decisions_size(), 1);
  EXPECT_EQ(batch->decisions(0).code(), 0) << batch->decisions(0).message();
}

TEST_F(GlobalTableTest, WaitingNamesTheRanksThatHaveNotSubmitted) {
  Announce(0, "w");
  const std::vector<negotiation::WaitingTensor> waiting = table_.Waiting(sets_, Clock::now());
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].name, "w");
  EXPECT_THAT(waiting[0].ready_ranks, ElementsAre(0, 1));
  EXPECT_THAT(waiting[0].missing_ranks, ElementsAre(2, 3));
}

}  // namespace
}  // namespace collective::daemon::negotiation
