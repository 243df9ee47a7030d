// Negotiation across nodes without MPI: one Negotiator per node, their
// control messages carried by an in-process network (fake_control_link.h),
// driven as the engines of the nodes drive them (announce, then Exchange
// until node 0's decisions reach everyone). Checks that every node gets the
// same decisions in the same order, that disagreements and failures reach
// every node, that steady-state steps are decided from the response cache,
// and that a silent node is noticed.
#include "daemon/negotiation/negotiator.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "daemon/negotiation/mismatch.h"
#include "tests/unit/negotiation/fake_control_link.h"

namespace collective::daemon::negotiation {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr auto kTimeout = std::chrono::seconds(30);

// Stands in for the kernels' combination: the parts, '|'-joined in the order
// node 0 hands them over.
std::optional<std::string> JoinParts(const std::vector<v1::RankRequest>& /*everyone*/,
                                     const std::vector<const std::string*>& parts) {
  std::string joined;
  for (const std::string* part : parts) joined += (joined.empty() ? "" : "|") + *part;
  return joined;
}

class NegotiatorTest : public ::testing::Test {
 protected:
  // Nodes holding `local_sizes[i]` ranks each; one global process set.
  void Form(const std::vector<int32_t>& local_sizes) {
    network_ = std::make_unique<FakeControlNetwork>(static_cast<int>(local_sizes.size()));
    local_sizes_ = local_sizes;
    int32_t size = 0;
    for (int32_t local : local_sizes) size += local;
    sets_ = std::make_unique<job::ProcessSetTable>(size);
    for (size_t node = 0; node < local_sizes.size(); ++node) {
      job::NodeLayout layout{
          .node = static_cast<int32_t>(node), .local_sizes = local_sizes, .hosts = {}};
      negotiators_.push_back(std::make_unique<Negotiator>(
          network_->LinkOf(static_cast<int>(node)), layout, &CheckAgreement,
          Negotiator::Options{.cache_capacity = 16,
                              .heartbeat_interval = std::chrono::milliseconds(100),
                              .node_timeout = std::chrono::seconds(5),
                              .combine = combine_,
                              .peer_parts = peer_parts_,
                              .decisions_after_run = decisions_after_run_}));
    }
  }

  // Node `node`'s ranks submitted `name` (float32 of `rows` rows; `rows_of`
  // overrides one global rank's).
  std::optional<uint32_t> Announce(size_t node, const std::string& name, int64_t rows,
                                   std::pair<int32_t, int64_t> rows_of = {-1, 0}) {
    const job::ProcessSet& set = *sets_->Find(0);
    ReadyTensor tensor;
    tensor.name = name;
    tensor.set_size = set.size();
    tensor.across_nodes = true;
    int32_t first = 0;
    for (size_t n = 0; n < node; ++n) first += local_sizes_[n];
    for (int32_t rank = first; rank < first + local_sizes_[node]; ++rank) {
      Submission& submission = tensor.submissions.emplace_back();
      submission.rank = rank;
      submission.set_rank = rank;
      v1::TensorRequest& request = submission.request;
      request.set_request_id(static_cast<uint64_t>(rank) + 1);
      request.set_name(name);
      request.set_collective(v1::COLLECTIVE_ALLREDUCE);
      request.set_op(v1::REDUCE_OP_SUM);
      request.set_dtype(v1::DATA_TYPE_FLOAT32);
      request.add_shape(rank == rows_of.first ? rows_of.second : rows);
      request.set_length(static_cast<uint64_t>(request.shape(0)) * 4);
    }
    return negotiators_[node]->Announce(tensor, set, local_sizes_[node]);
  }

  // Exchanges until every node has received `batches` more batches of
  // decisions (or the deadline passes); every node's batches, in order.
  std::vector<std::vector<v1::Decisions>> Settle(size_t batches) {
    std::vector<std::vector<v1::Decisions>> received(negotiators_.size());
    const auto deadline = Clock::now() + kTimeout;
    auto settled = [&] {
      for (const auto& batches_of_node : received) {
        if (batches_of_node.size() < batches) return false;
      }
      return true;
    };
    while (!settled() && Clock::now() < deadline) {
      for (size_t node = 0; node < negotiators_.size(); ++node) {
        auto incoming = negotiators_[node]->Exchange(*sets_, Clock::now());
        EXPECT_TRUE(incoming.ok()) << incoming.status();
        if (!incoming.ok()) return received;
        for (v1::Decisions& batch : incoming->batches) received[node].push_back(std::move(batch));
        for (auto& event : incoming->events) events_[node].push_back(event.second);
      }
    }
    EXPECT_TRUE(settled()) << "node 0's decisions did not reach every node";
    return received;
  }

  // Nodes of `local_sizes` that send their parts to one another
  // (cross_node_peer_parts), with "bias" negotiated once and cached.
  void FormWithPeerPartsAndCacheBias(const std::vector<int32_t>& local_sizes) {
    combine_ = &JoinParts;
    peer_parts_ = true;
    Form(local_sizes);
    for (size_t node = 0; node < local_sizes.size(); ++node) Announce(node, "bias", 2);
    Settle(1);
  }

  std::vector<std::string> Names(const v1::Decisions& batch, const Negotiator& negotiator) const {
    std::vector<std::string> names;
    for (const v1::Decision& decision : batch.decisions()) {
      if (decision.from_cache()) {
        const ResponseCache::Entry* entry = negotiator.CachedAt(decision.cache_bit());
        names.push_back(entry == nullptr ? "?" : "cached:" + entry->key.second);
      } else {
        names.push_back(decision.name());
      }
    }
    return names;
  }

  GlobalCombine combine_ = nullptr;   // node 0's, for the nodes formed next
  bool peer_parts_ = false;           // for the nodes formed next
  bool decisions_after_run_ = false;  // for the nodes formed next
  std::unique_ptr<FakeControlNetwork> network_;
  std::vector<int32_t> local_sizes_;
  std::unique_ptr<job::ProcessSetTable> sets_;
  std::vector<std::unique_ptr<Negotiator>> negotiators_;
  std::map<size_t, std::vector<v1::JobEvent>> events_;
};

TEST_F(NegotiatorTest, EveryNodeCarriesOutTheSameDecisionsInTheSameOrder) {
  Form({2, 1, 2});
  // Node 2 is ready with "b" before "a"; node 0 decides once all are.
  Announce(2, "b", 4);
  Announce(2, "a", 3);
  Announce(0, "a", 3);
  Announce(1, "a", 3);
  Announce(0, "b", 4);
  Announce(1, "b", 4);
  const auto received = Settle(1);
  ASSERT_EQ(received.size(), 3u);
  const v1::Decisions& first = received[0].front();
  for (size_t node = 1; node < received.size(); ++node) {
    ASSERT_FALSE(received[node].empty());
    EXPECT_EQ(received[node].front().SerializeAsString(), first.SerializeAsString())
        << "node " << node << " got other decisions than node 0";
  }
  std::vector<std::string> names;
  for (const auto& batch : received[0]) {
    for (const std::string& name : Names(batch, *negotiators_[0])) names.push_back(name);
  }
  EXPECT_THAT(names, ElementsAre("a", "b")) << "in the order the last node became ready";
  for (const v1::Decision& decision : first.decisions()) {
    EXPECT_EQ(decision.code(), 0) << decision.message();
    EXPECT_EQ(decision.ranks_size(), 5) << "every rank's request travels with the decision";
  }
}

TEST_F(NegotiatorTest, ADisagreementAcrossNodesIsOneErrorEveryNodeHears) {
  Form({2, 2});
  Announce(0, "w", 3);
  Announce(1, "w", 3, {3, 4});  // global rank 3 sends 4 rows
  const auto received = Settle(1);
  for (size_t node = 0; node < received.size(); ++node) {
    ASSERT_EQ(received[node].front().decisions_size(), 1);
    const v1::Decision& decision = received[node].front().decisions(0);
    EXPECT_EQ(decision.code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(decision.message(), HasSubstr("'w'"));
    EXPECT_THAT(decision.message(), HasSubstr("rank 3"));
  }
}

TEST_F(NegotiatorTest, SteadyStateStepsAreDecidedFromTheResponseCache) {
  Form({1, 1});
  for (int step = 0; step < 3; ++step) {
    Announce(0, "grad", 8);
    Announce(1, "grad", 8);
    const auto received = Settle(1);
    for (size_t node = 0; node < received.size(); ++node) {
      ASSERT_EQ(received[node].size(), 1u) << "step " << step;
      ASSERT_EQ(received[node].front().decisions_size(), 1);
      const v1::Decision& decision = received[node].front().decisions(0);
      EXPECT_EQ(decision.code(), 0);
      EXPECT_EQ(decision.from_cache(), step > 0) << "step " << step << ", node " << node;
    }
  }
  v1::Totals totals;
  negotiators_[0]->AddTo(totals);
  negotiators_[1]->AddTo(totals);
  EXPECT_EQ(totals.announced_in_full(), 2u) << "each node announced the first step in full";
  EXPECT_EQ(totals.announced_from_cache(), 4u) << "and the next two by cache bit";
  EXPECT_EQ(totals.decided_from_cache(), 2u);
}

TEST_F(NegotiatorTest, ASmallAllreducesPartsTravelWithItsBitsAndItsCombinationWithTheDecision) {
  combine_ = &JoinParts;
  Form({1, 2, 1});
  const std::vector<std::string> part = {"zero", "one", "two"};
  for (int step = 0; step < 2; ++step) {
    for (size_t node : {2, 0, 1}) {
      const std::optional<uint32_t> bit = Announce(node, "bias", 2);
      EXPECT_EQ(bit.has_value(), step > 0) << "step " << step << ", node " << node;
      if (bit.has_value()) negotiators_[node]->AddReduction(*bit, part[node]);
    }
    const auto received = Settle(1);
    for (size_t node = 0; node < received.size(); ++node) {
      ASSERT_EQ(received[node].size(), 1u);
      ASSERT_EQ(received[node].front().decisions_size(), 1);
      const v1::Decision& decision = received[node].front().decisions(0);
      if (step == 0) {
        EXPECT_FALSE(decision.has_combined()) << "decided in full: the nodes combine";
      } else {
        EXPECT_EQ(decision.combined(), "zero|one|two") << "node " << node;
      }
    }
  }
  v1::Totals totals;
  negotiators_[0]->AddTo(totals);
  EXPECT_EQ(totals.decided_combined(), 1u);
}

TEST_F(NegotiatorTest, ANodeHoldingEveryPartCombinesThemWithoutWaitingForNodeZero) {
  FormWithPeerPartsAndCacheBias({1, 1});
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const std::string zero = absl::StrCat("zero", step);
    const std::string one = absl::StrCat("one", step);
    for (auto [node, part] : {std::pair<size_t, std::string>(0, zero), {1, one}}) {
      const std::optional<uint32_t> bit = Announce(node, "bias", 2);
      ASSERT_TRUE(bit.has_value());
      negotiators_[node]->AddReduction(*bit, part);
    }
    // Node 0 holds only its own announcement, and sends node 1 its part.
    auto at_zero = negotiators_[0]->Exchange(*sets_, Clock::now());
    ASSERT_TRUE(at_zero.ok()) << at_zero.status();
    EXPECT_THAT(at_zero->batches, IsEmpty());
    // Node 1 combines the two parts at once.
    auto at_one = negotiators_[1]->Exchange(*sets_, Clock::now());
    ASSERT_TRUE(at_one.ok()) << at_one.status();
    ASSERT_EQ(at_one->batches.size(), 1u);
    ASSERT_EQ(at_one->batches[0].decisions_size(), 1);
    const v1::Decision& own = at_one->batches[0].decisions(0);
    EXPECT_TRUE(own.from_cache());
    EXPECT_THAT(Names(at_one->batches[0], *negotiators_[1]), ElementsAre("cached:bias"));
    EXPECT_EQ(own.combined(), zero + "|" + one);
    // Node 0 decides it with the same combination; node 1 lets that pass.
    at_zero = negotiators_[0]->Exchange(*sets_, Clock::now());
    ASSERT_TRUE(at_zero.ok()) << at_zero.status();
    ASSERT_EQ(at_zero->batches.size(), 1u);
    EXPECT_EQ(at_zero->batches[0].decisions(0).combined(), zero + "|" + one);
    at_one = negotiators_[1]->Exchange(*sets_, Clock::now());
    ASSERT_TRUE(at_one.ok()) << at_one.status();
    EXPECT_THAT(at_one->batches, IsEmpty()) << "node 0's decision of a step settled here";
  }
  v1::Totals totals;
  negotiators_[1]->AddTo(totals);
  EXPECT_EQ(totals.combined_from_peers(), 3u);
  negotiators_[0]->AddTo(totals);
  EXPECT_EQ(totals.decided_combined(), 3u);
}

TEST_F(NegotiatorTest, ANodeMissingAPartTakesNodeZerosDecision) {
  FormWithPeerPartsAndCacheBias({1, 1});
  ASSERT_TRUE(Announce(0, "bias", 2).has_value());  // no part: e.g. its limit is smaller
  const std::optional<uint32_t> bit = Announce(1, "bias", 2);
  ASSERT_TRUE(bit.has_value());
  negotiators_[1]->AddReduction(*bit, "one");
  const auto received = Settle(1);
  ASSERT_EQ(received[1].size(), 1u);
  ASSERT_EQ(received[1][0].decisions_size(), 1);
  EXPECT_TRUE(received[1][0].decisions(0).from_cache());
  EXPECT_FALSE(received[1][0].decisions(0).has_combined()) << "the nodes combine it by MPI";
  v1::Totals totals;
  negotiators_[1]->AddTo(totals);
  EXPECT_EQ(totals.combined_from_peers(), 0u);
}

TEST_F(NegotiatorTest, OnThreeNodesEachNodeButZeroCombinesOnceItHoldsEveryPart) {
  FormWithPeerPartsAndCacheBias({1, 2, 1});
  const std::vector<std::string> part = {"zero", "one", "two"};
  for (size_t node : {0, 1, 2}) {
    const std::optional<uint32_t> bit = Announce(node, "bias", 2);
    ASSERT_TRUE(bit.has_value());
    negotiators_[node]->AddReduction(*bit, part[node]);
  }
  std::vector<std::vector<v1::Decisions>> received(3);
  // Node 1 lacks node 2's part at first; node 2 holds both others'.
  for (size_t node : {0, 1, 2, 1, 0, 1, 2}) {
    auto incoming = negotiators_[node]->Exchange(*sets_, Clock::now());
    ASSERT_TRUE(incoming.ok()) << incoming.status();
    for (v1::Decisions& batch : incoming->batches) received[node].push_back(std::move(batch));
  }
  for (size_t node = 0; node < 3; ++node) {
    SCOPED_TRACE(absl::StrCat("node ", node));
    ASSERT_EQ(received[node].size(), 1u) << "one decision each: node 0's passes the others";
    ASSERT_EQ(received[node][0].decisions_size(), 1);
    EXPECT_EQ(received[node][0].decisions(0).combined(), "zero|one|two");
  }
  v1::Totals totals;
  negotiators_[1]->AddTo(totals);
  negotiators_[2]->AddTo(totals);
  EXPECT_EQ(totals.combined_from_peers(), 2u);
}

TEST_F(NegotiatorTest, NodeZeroSendsCombinedStepsAfterRunningThemAndAnyOtherBatchAtOnce) {
  combine_ = &JoinParts;
  decisions_after_run_ = true;
  Form({1, 1});
  Announce(0, "bias", 2);
  Announce(1, "bias", 2);
  ASSERT_EQ(Settle(1)[1].size(), 1u) << "a batch that puts a cache entry goes at once";

  auto announce_bias = [&](const std::string& step) {
    for (size_t node : {1, 0}) {
      const std::optional<uint32_t> bit = Announce(node, "bias", 2);
      ASSERT_TRUE(bit.has_value());
      negotiators_[node]->AddReduction(*bit, absl::StrCat(node, step));
    }
  };
  announce_bias("a");
  ASSERT_TRUE(negotiators_[1]->Exchange(*sets_, Clock::now()).ok());
  auto at_zero = negotiators_[0]->Exchange(*sets_, Clock::now());
  ASSERT_TRUE(at_zero.ok()) << at_zero.status();
  ASSERT_EQ(at_zero->batches.size(), 1u) << "node 0 runs its decision";
  auto at_one = negotiators_[1]->Exchange(*sets_, Clock::now());
  ASSERT_TRUE(at_one.ok()) << at_one.status();
  EXPECT_THAT(at_one->batches, IsEmpty()) << "held until node 0 ran it";
  ASSERT_TRUE(negotiators_[0]->SendDecided().ok());
  at_one = negotiators_[1]->Exchange(*sets_, Clock::now());
  ASSERT_TRUE(at_one.ok()) << at_one.status();
  ASSERT_EQ(at_one->batches.size(), 1u);
  EXPECT_EQ(at_one->batches[0].decisions(0).combined(), "0a|1a");

  // A held step, then a tensor decided in full: both reach node 1, in
  // decision order.
  announce_bias("b");
  ASSERT_TRUE(negotiators_[1]->Exchange(*sets_, Clock::now()).ok());
  ASSERT_TRUE(negotiators_[0]->Exchange(*sets_, Clock::now()).ok());
  Announce(0, "w", 3);
  Announce(1, "w", 3);
  ASSERT_TRUE(negotiators_[1]->Exchange(*sets_, Clock::now()).ok());
  at_zero = negotiators_[0]->Exchange(*sets_, Clock::now());
  ASSERT_TRUE(at_zero.ok()) << at_zero.status();
  ASSERT_EQ(at_zero->batches.size(), 1u);
  at_one = negotiators_[1]->Exchange(*sets_, Clock::now());
  ASSERT_TRUE(at_one.ok()) << at_one.status();
  ASSERT_EQ(at_one->batches.size(), 2u) << "the held step went with the next batch";
  EXPECT_EQ(at_one->batches[0].decisions(0).combined(), "0b|1b");
  EXPECT_THAT(Names(at_one->batches[1], *negotiators_[1]), ElementsAre("w"));
}

TEST_F(NegotiatorTest, AJobEventReachesEveryOtherNode) {
  Form({1, 1, 1});
  v1::JobEvent failed;
  failed.set_kind(v1::JobEvent::KIND_FAILED);
  failed.set_message("rank 2 died");
  ASSERT_TRUE(negotiators_[2]->Tell(failed).ok());
  for (size_t node = 0; node < 3; ++node) {
    auto incoming = negotiators_[node]->Exchange(*sets_, Clock::now());
    ASSERT_TRUE(incoming.ok()) << incoming.status();
    if (node == 2) {
      EXPECT_TRUE(incoming->events.empty()) << "a node does not tell itself";
      continue;
    }
    ASSERT_EQ(incoming->events.size(), 1u) << "node " << node;
    EXPECT_EQ(incoming->events[0].first, 2);
    EXPECT_EQ(incoming->events[0].second.message(), "rank 2 died");
  }
}

TEST_F(NegotiatorTest, ANodeThatFallsSilentIsNamedOnceTheTimeoutPasses) {
  Form({1, 1, 1});
  network_->CutOff(1);
  const Clock::time_point start = Clock::now();
  for (size_t node = 0; node < 3; ++node) {
    ASSERT_TRUE(negotiators_[node]->Exchange(*sets_, start).ok());
  }
  EXPECT_EQ(negotiators_[0]->Silent(start), -1) << "within the timeout nobody is silent";
  const Clock::time_point later = start + negotiators_[0]->node_timeout() + std::chrono::seconds(1);
  // Node 2 keeps talking; node 1's messages are lost.
  ASSERT_TRUE(negotiators_[2]->Exchange(*sets_, later).ok());
  ASSERT_TRUE(negotiators_[0]->Exchange(*sets_, later).ok());
  EXPECT_EQ(negotiators_[0]->Silent(later), 1) << "node 0 watches every node";
  EXPECT_GT(network_->sent(), 0);
}

}  // namespace
}  // namespace collective::daemon::negotiation
