// The response cache of negotiation across nodes: every node's copy
// (ResponseCache), node 0's bookkeeping of its bits (CacheBits), and the bit
// vectors NodeReady carries.
#include "daemon/negotiation/response_cache.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace collective::daemon::negotiation {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::TensorRequest Request(uint64_t request_id, int64_t rows) {
  v1::TensorRequest request;
  request.set_request_id(request_id);
  request.set_name("w");
  request.set_collective(v1::COLLECTIVE_ALLREDUCE);
  request.set_dtype(v1::DATA_TYPE_FLOAT32);
  request.add_shape(rows);
  request.set_offset(4096 * request_id);
  request.set_group_id(request_id);
  return request;
}

std::vector<v1::RankRequest> Ranks(int64_t rows, int count) {
  std::vector<v1::RankRequest> ranks;
  for (int rank = 0; rank < count; ++rank) {
    v1::RankRequest& added = ranks.emplace_back();
    added.set_set_rank(rank);
    added.set_rank(rank);
    *added.mutable_request() = negotiation::CacheForm(Request(1, rows));
  }
  return ranks;
}

negotiation::ReadyTensor Local(int64_t rows, uint64_t request_id, std::vector<int32_t> set_ranks) {
  negotiation::ReadyTensor tensor;
  tensor.name = "w";
  tensor.process_set_id = 0;
  for (int32_t rank : set_ranks) {
    tensor.submissions.push_back(negotiation::Submission{
        .set_rank = rank, .rank = rank, .request = Request(request_id, rows)});
  }
  return tensor;
}

TEST(CacheFormTest, KeepsWhatRanksAgreeOnAndDropsWhatChangesEveryStep) {
  const v1::TensorRequest form = negotiation::CacheForm(Request(7, 3));
  EXPECT_EQ(form.request_id(), 0u);
  EXPECT_EQ(form.offset(), 0u);
  EXPECT_EQ(form.group_id(), 1u) << "grouped, whatever the client's id for the group";
  EXPECT_EQ(form.name(), "w");
  EXPECT_EQ(form.dtype(), v1::DATA_TYPE_FLOAT32);
  EXPECT_THAT(form.shape(), ElementsAre(3));
}

TEST(ResponseCacheTest, MatchesATensorWhoseLocalRequestsEqualTheCachedOnes) {
  negotiation::ResponseCache cache(4);
  cache.Put(2, {0, "w"}, Ranks(3, 4));
  EXPECT_EQ(cache.BitOf({0, "w"}), 2u);
  // Other request ids and offsets: the same tensor in a later step.
  EXPECT_EQ(cache.Match(Local(3, 9, {2, 3})), 2u);
  // Another shape on one rank: announced in full.
  EXPECT_EQ(cache.Match(Local(4, 9, {2, 3})), std::nullopt);
  // A set rank the entry does not have.
  EXPECT_EQ(cache.Match(Local(3, 9, {4})), std::nullopt);
  // Any other field the ranks agree on, set or changed on one rank.
  negotiation::ReadyTensor scaled = Local(3, 9, {2, 3});
  scaled.submissions[1].request.set_prescale(1.0);
  EXPECT_EQ(cache.Match(scaled), std::nullopt) << "a prescale of 1 is still a prescale";
  negotiation::ReadyTensor averaged = Local(3, 9, {2, 3});
  averaged.submissions[0].request.set_op(v1::REDUCE_OP_AVERAGE);
  EXPECT_EQ(cache.Match(averaged), std::nullopt);
  negotiation::ReadyTensor other = Local(3, 9, {0});
  other.process_set_id = 1;
  EXPECT_EQ(cache.Match(other), std::nullopt);
}

TEST(ResponseCacheTest, ARetiredEntryStaysReadableButIsNoLongerMatched) {
  negotiation::ResponseCache cache(4);
  cache.Put(0, {0, "w"}, Ranks(3, 2));
  cache.Retire(0);
  EXPECT_EQ(cache.BitOf({0, "w"}), std::nullopt);
  EXPECT_EQ(cache.Match(Local(3, 1, {0})), std::nullopt);
  ASSERT_NE(cache.At(0), nullptr);
  EXPECT_TRUE(cache.At(0)->retired);
  EXPECT_EQ(cache.At(0)->key.second, "w");
  EXPECT_EQ(cache.At(1), nullptr);
  EXPECT_EQ(cache.live_entries(), 0u);
}

TEST(ResponseCacheTest, PuttingAKeyAgainMovesItToTheNewBit) {
  negotiation::ResponseCache cache(4);
  cache.Put(0, {0, "w"}, Ranks(3, 2));
  cache.Put(1, {0, "w"}, Ranks(5, 2));
  EXPECT_EQ(cache.BitOf({0, "w"}), 1u);
  EXPECT_TRUE(cache.At(0)->retired);
  EXPECT_EQ(cache.live_entries(), 1u);
  // A bit reused for another key drops the old key.
  cache.Put(1, {0, "v"}, Ranks(5, 2));
  EXPECT_EQ(cache.BitOf({0, "w"}), std::nullopt);
  EXPECT_EQ(cache.BitOf({0, "v"}), 1u);
}

TEST(ResponseCacheTest, AppliesABatchsRetirementsThenItsPuts) {
  negotiation::ResponseCache cache(4);
  cache.Put(0, {0, "old"}, Ranks(3, 2));
  v1::Decisions batch;
  v1::Decision& decision = *batch.add_decisions();
  decision.set_process_set_id(0);
  decision.set_name("w");
  decision.add_retire_bits(0);
  decision.set_cache_put(true);
  decision.set_cache_bit(3);
  for (const v1::RankRequest& rank : Ranks(3, 2)) {
    v1::RankRequest& sent = *decision.add_ranks();
    sent = rank;
    sent.mutable_request()->set_request_id(42);  // as the ranks sent it
  }
  cache.Apply(batch);
  EXPECT_EQ(cache.BitOf({0, "old"}), std::nullopt);
  EXPECT_EQ(cache.BitOf({0, "w"}), 3u);
  EXPECT_EQ(cache.At(3)->ranks.at(1).request().request_id(), 0u) << "kept in cache form";
  EXPECT_EQ(cache.Match(Local(3, 77, {0, 1})), 3u);
}

TEST(ResponseCacheTest, CapacityZeroMatchesNothing) {
  negotiation::ResponseCache cache(0);
  EXPECT_FALSE(cache.enabled());
  cache.Put(0, {0, "w"}, Ranks(3, 1));
  EXPECT_EQ(cache.Match(Local(3, 1, {0})), std::nullopt);
}

TEST(CacheBitsTest, HandsOutBitsInOrderUpToTheCapacity) {
  negotiation::CacheBits bits(3, 2);
  std::vector<uint32_t> retired;
  EXPECT_EQ(bits.Take(1, retired), 0u);
  EXPECT_EQ(bits.Take(1, retired), 1u);
  EXPECT_EQ(bits.Take(1, retired), 2u);
  EXPECT_THAT(retired, IsEmpty());
}

TEST(CacheBitsTest, WhenFullRetiresTheLeastRecentlyUsedAndFreesItOnceEveryNodeApplied) {
  negotiation::CacheBits bits(2, 2);
  std::vector<uint32_t> retired;
  ASSERT_EQ(bits.Take(1, retired), 0u);
  ASSERT_EQ(bits.Take(1, retired), 1u);
  bits.Touch(0);  // 1 is now the least recently used
  // Batch 2 needs a bit: none is free, so 1 retires in batch 2.
  EXPECT_EQ(bits.Take(2, retired), std::nullopt);
  EXPECT_THAT(retired, ElementsAre(1u));
  retired.clear();
  // Until every node applied batch 2, bit 1 may still be set by a node that
  // has not seen its retirement: it stays taken.
  bits.Acknowledge(0, 2);
  bits.Acknowledge(1, 1);
  EXPECT_EQ(bits.Take(3, retired), std::nullopt);
  EXPECT_THAT(retired, ElementsAre(0u));  // full again: the next oldest goes
  retired.clear();
  bits.Acknowledge(1, 2);
  EXPECT_EQ(bits.Take(4, retired), 1u);
  EXPECT_THAT(retired, IsEmpty());
  // Bit 0 retired in batch 3: free after batch 3 everywhere.
  bits.Acknowledge(0, 3);
  bits.Acknowledge(1, 3);
  EXPECT_EQ(bits.Take(4, retired), 0u);
}

TEST(CacheBitsTest, AnExplicitRetirementWaitsForItsBatchToo) {
  negotiation::CacheBits bits(1, 1);
  std::vector<uint32_t> retired;
  ASSERT_EQ(bits.Take(1, retired), 0u);
  bits.Retire(0, 5);
  bits.Acknowledge(0, 4);
  EXPECT_EQ(bits.Take(6, retired), std::nullopt);
  EXPECT_THAT(retired, IsEmpty()) << "nothing live to evict";
  bits.Acknowledge(0, 5);
  EXPECT_EQ(bits.Take(6, retired), 0u);
}

TEST(BitVectorTest, PacksAndUnpacksAnySetOfBits) {
  EXPECT_EQ(negotiation::PackBits({}), "");
  EXPECT_THAT(negotiation::UnpackBits(""), IsEmpty());
  const std::string packed = negotiation::PackBits({0, 9, 3, 1023});
  EXPECT_EQ(packed.size(), 128u);
  EXPECT_EQ(static_cast<unsigned char>(packed[0]), 0b1001u);
  EXPECT_EQ(static_cast<unsigned char>(packed[1]), 0b10u);
  EXPECT_THAT(negotiation::UnpackBits(packed), ElementsAre(0u, 3u, 9u, 1023u));
}

}  // namespace
}  // namespace collective::daemon::negotiation
