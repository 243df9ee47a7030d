// daemon/negotiation/message_matcher: which send meets which receive (by
// process set, source, destination and tag, in order), self-sends, what
// waits, and what the job's failure or a set's removal takes; and the
// agreement check of a matched pair (mismatch.h).
#include "daemon/negotiation/message_matcher.h"

#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/negotiation/mismatch.h"

namespace collective::daemon::negotiation {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class MessageMatcherTest : public ::testing::Test {
 protected:
  static constexpr int32_t kSize = 4;

  void SetUp() override {
    for (int32_t rank = 0; rank < kSize; ++rank) {
      auto client = std::make_unique<job::ClientRecord>();
      client->id = 100 + rank;
      client->topology.set_rank(rank);
      client->topology.set_size(kSize);
      clients_.push_back(std::move(client));
      global_.ranks.push_back(rank);
    }
    global_.id = 0;
    odd_.id = 3;
    odd_.ranks = {1, 3};
  }

  // A send (from `rank` to `peer`) or receive (at `rank` from `peer`) of
  // `elements` float32s; ranks within `set`.
  Submission Make(v1::Collective collective, const job::ProcessSet& set, int32_t set_rank,
                  int32_t peer, int32_t tag, uint64_t request_id, int64_t elements = 4,
                  v1::DataType dtype = v1::DATA_TYPE_FLOAT32) {
    Submission submission;
    submission.client = clients_[set.ranks[set_rank]].get();
    submission.rank = set.ranks[set_rank];
    submission.set_rank = set_rank;
    v1::TensorRequest& request = submission.request;
    request.set_request_id(request_id);
    request.set_name(collective == v1::COLLECTIVE_SEND ? "send" : "recv");
    request.set_collective(collective);
    request.set_dtype(dtype);
    request.add_shape(elements);
    request.set_length(static_cast<uint64_t>(elements) * (dtype == v1::DATA_TYPE_FLOAT64 ? 8 : 4));
    request.set_process_set_id(set.id);
    request.set_peer_rank(peer);
    request.set_tag(tag);
    submission.at = Clock::now();
    return submission;
  }

  void Send(int32_t from, int32_t to, int32_t tag, uint64_t id, int64_t elements = 4) {
    matcher_.Add(Make(v1::COLLECTIVE_SEND, global_, from, to, tag, id, elements), global_);
  }
  void Recv(int32_t at, int32_t from, int32_t tag, uint64_t id, int64_t elements = 4,
            v1::DataType dtype = v1::DATA_TYPE_FLOAT32) {
    matcher_.Add(Make(v1::COLLECTIVE_RECV, global_, at, from, tag, id, elements, dtype), global_);
  }

  // "send id -> recv id" for each matched pair, in order.
  std::vector<std::string> Pairs() {
    std::vector<std::string> pairs;
    for (const ReadyTensor& ready : matcher_.TakeMatched()) {
      EXPECT_EQ(ready.submissions.size(), 2u);
      EXPECT_EQ(ready.submissions[0].request.collective(), v1::COLLECTIVE_SEND);
      EXPECT_EQ(ready.submissions[1].request.collective(), v1::COLLECTIVE_RECV);
      pairs.push_back(std::to_string(ready.submissions[0].request.request_id()) + "->" +
                      std::to_string(ready.submissions[1].request.request_id()));
    }
    return pairs;
  }

  std::vector<std::unique_ptr<job::ClientRecord>> clients_;
  job::ProcessSet global_;
  job::ProcessSet odd_;
  MessageMatcher matcher_;
};

TEST_F(MessageMatcherTest, ASendMeetsTheReceiveOfItsRanksAndTagWhicheverComesFirst) {
  Send(0, 1, 7, 1);
  EXPECT_THAT(Pairs(), IsEmpty());
  Recv(1, 0, 8, 2);  // another tag
  Recv(2, 0, 7, 3);  // another destination
  Recv(0, 1, 7, 4);  // the reverse direction
  EXPECT_THAT(Pairs(), IsEmpty());
  Recv(1, 0, 7, 5);
  EXPECT_THAT(Pairs(), ElementsAre("1->5"));
  Send(0, 1, 8, 6);  // the receive came first
  EXPECT_THAT(Pairs(), ElementsAre("6->2"));
  EXPECT_FALSE(matcher_.idle());  // 3 and 4 wait
}

TEST_F(MessageMatcherTest, MessagesOfOneTagMatchInOrderAndTagsDoNotOvertakeEachOther) {
  Send(0, 1, 5, 1);
  Send(0, 1, 6, 2);
  Send(0, 1, 5, 3);
  Send(0, 1, 5, 4);
  Recv(1, 0, 5, 11);
  Recv(1, 0, 5, 12);
  Recv(1, 0, 6, 13);
  Recv(1, 0, 5, 14);
  EXPECT_THAT(Pairs(), ElementsAre("1->11", "3->12", "2->13", "4->14"));
  EXPECT_TRUE(matcher_.idle());
}

TEST_F(MessageMatcherTest, ARankSendsToItselfWhicheverHalfComesFirst) {
  Recv(2, 2, 0, 1);
  Send(2, 2, 0, 2);
  Send(2, 2, 0, 3);
  Recv(2, 2, 0, 4);
  EXPECT_THAT(Pairs(), ElementsAre("2->1", "3->4"));
  EXPECT_TRUE(matcher_.idle());
}

TEST_F(MessageMatcherTest, ProcessSetsMatchSeparatelyWithRanksWithinTheSet) {
  // Set 3 is global ranks [1, 3]: its rank 0 is global 1.
  matcher_.Add(Make(v1::COLLECTIVE_SEND, odd_, 0, 1, 0, 1), odd_);
  Recv(3, 1, 0, 2);  // global set, same global ranks: a different message
  EXPECT_THAT(Pairs(), IsEmpty());
  matcher_.Add(Make(v1::COLLECTIVE_RECV, odd_, 1, 0, 0, 3), odd_);
  std::vector<ReadyTensor> matched = matcher_.TakeMatched();
  ASSERT_EQ(matched.size(), 1u);
  EXPECT_EQ(matched[0].process_set_id, 3);
  EXPECT_EQ(matched[0].submissions[0].rank, 1);
  EXPECT_EQ(matched[0].submissions[1].rank, 3);
  EXPECT_EQ(matched[0].name, "message from rank 0 to rank 1 with tag 0 (process set 3)");
  const std::vector<WaitingMessage> waiting = matcher_.Waiting();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].collective, v1::COLLECTIVE_RECV);
  EXPECT_EQ(waiting[0].rank, 3);
  EXPECT_EQ(waiting[0].peer, 1);
}

TEST_F(MessageMatcherTest, WaitingSaysWhoWaitsForWhomOldestFirst) {
  Send(0, 3, 9, 1, 8);
  Recv(2, 1, 4, 2);
  const std::vector<WaitingMessage> waiting = matcher_.Waiting();
  ASSERT_EQ(waiting.size(), 2u);
  EXPECT_EQ(waiting[0].collective, v1::COLLECTIVE_SEND);
  EXPECT_EQ(waiting[0].rank, 0);
  EXPECT_EQ(waiting[0].peer, 3);
  EXPECT_EQ(waiting[0].tag, 9);
  EXPECT_EQ(waiting[0].bytes, 32u);
  EXPECT_EQ(waiting[1].collective, v1::COLLECTIVE_RECV);
  EXPECT_EQ(waiting[1].rank, 2);
  EXPECT_EQ(waiting[1].peer, 1);
}

TEST_F(MessageMatcherTest, TakeAllAndTakeSetEmptyTheQueues) {
  Send(0, 1, 0, 1);
  Recv(2, 3, 0, 2);
  matcher_.Add(Make(v1::COLLECTIVE_SEND, odd_, 0, 1, 0, 3), odd_);
  std::vector<Submission> taken = matcher_.TakeSet(3);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].request.request_id(), 3u);
  EXPECT_EQ(matcher_.TakeAll().size(), 2u);
  EXPECT_TRUE(matcher_.idle());
  // Nothing of the taken sends matches later receives.
  Recv(1, 0, 0, 4);
  EXPECT_THAT(Pairs(), IsEmpty());
}

TEST_F(MessageMatcherTest, AReceiveOfAnotherSizeOrDtypeIsAMismatchNamingBothRanks) {
  Send(0, 1, 0, 1, 4);
  Recv(1, 0, 0, 2, 8);
  std::vector<ReadyTensor> matched = matcher_.TakeMatched();
  ASSERT_EQ(matched.size(), 1u);
  absl::Status status = CheckAgreement(matched[0]);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("message from rank 0 to rank 1 with tag 0"));
  EXPECT_THAT(status.message(), HasSubstr("rank 0 sends 16 bytes"));
  EXPECT_THAT(status.message(), HasSubstr("rank 1 receives 32 bytes"));

  Send(0, 1, 0, 3, 4);
  Recv(1, 0, 0, 4, 2, v1::DATA_TYPE_FLOAT64);  // 16 bytes, but float64
  matched = matcher_.TakeMatched();
  ASSERT_EQ(matched.size(), 1u);
  status = CheckAgreement(matched[0]);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("float64"));

  // The same bytes and dtype in another shape agree, as MPI's counts do.
  matcher_.Add(Make(v1::COLLECTIVE_SEND, global_, 0, 1, 0, 5, 4), global_);
  Submission receive = Make(v1::COLLECTIVE_RECV, global_, 1, 0, 0, 6, 4);
  receive.request.clear_shape();
  receive.request.add_shape(2);
  receive.request.add_shape(2);
  matcher_.Add(std::move(receive), global_);
  matched = matcher_.TakeMatched();
  ASSERT_EQ(matched.size(), 1u);
  EXPECT_TRUE(CheckAgreement(matched[0]).ok());
}

}  // namespace
}  // namespace collective::daemon::negotiation
