// daemon/negotiation/remote_messages: the rendezvous of point-to-point
// messages between ranks of different nodes, with nodes as objects of one
// test over the in-process control network — which send meets which
// receive (in order, by tag), small messages' bytes in the answer, the
// mismatch that both ranks hear in the same words, what waits, and what a
// failed job or removed set takes.
#include "daemon/negotiation/remote_messages.h"

#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/negotiation/fake_control_link.h"

namespace collective::daemon::negotiation {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// Two nodes of two ranks each (ranks 0-1 on node 0, 2-3 on node 1), and a
// third of one rank (rank 4): the global set of 5.
class RemoteMessagesTest : public ::testing::Test {
 protected:
  static constexpr int kNodes = 3;
  static constexpr int32_t kSize = 5;

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
    for (int node = 0; node < kNodes; ++node) {
      links_.push_back(network_.LinkOf(node));
      job::NodeLayout layout;
      layout.node = node;
      layout.local_sizes = {2, 2, 1};
      nodes_.push_back(std::make_unique<RemoteMessages>(*links_.back(), layout));
    }
  }

  int NodeOf(int32_t rank) const { return rank < 2 ? 0 : rank < 4 ? 1 : 2; }

  // A send from `rank` to `peer` (or a receive at `rank` from `peer`) of
  // `elements` float32s, added on `rank`'s node.
  void Add(v1::Collective collective, int32_t rank, int32_t peer, int32_t tag, uint64_t request_id,
           int64_t elements = 4, v1::DataType dtype = v1::DATA_TYPE_FLOAT32) {
    Submission submission;
    submission.client = clients_[rank].get();
    submission.rank = rank;
    submission.set_rank = rank;
    v1::TensorRequest& request = submission.request;
    request.set_request_id(request_id);
    request.set_collective(collective);
    request.set_dtype(dtype);
    request.add_shape(elements);
    request.set_length(static_cast<uint64_t>(elements) * (dtype == v1::DATA_TYPE_FLOAT64 ? 8 : 4));
    request.set_process_set_id(0);
    request.set_peer_rank(peer);
    request.set_tag(tag);
    submission.at = Clock::now();
    ASSERT_TRUE(nodes_[NodeOf(rank)]->Add(std::move(submission), global_).ok());
  }

  RemoteMessages::Polled Poll(int node) {
    absl::StatusOr<RemoteMessages::Polled> polled = nodes_[node]->Poll();
    EXPECT_TRUE(polled.ok()) << polled.status();
    return polled.ok() ? std::move(*polled) : RemoteMessages::Polled{};
  }

  FakeControlNetwork network_{kNodes};
  std::vector<std::unique_ptr<ControlLink>> links_;
  std::vector<std::unique_ptr<RemoteMessages>> nodes_;
  std::vector<std::unique_ptr<job::ClientRecord>> clients_;
  job::ProcessSet global_;
};

TEST_F(RemoteMessagesTest, TheKthSendOfATagMeetsTheKthReceiveOfThatTagAndSmallBytesRideAlong) {
  // Rank 2 (node 1) receives from rank 0 (node 0): tags 5, 7, 5.
  Add(v1::COLLECTIVE_RECV, 2, 0, 5, 21);
  Add(v1::COLLECTIVE_RECV, 2, 0, 7, 22);
  Add(v1::COLLECTIVE_RECV, 2, 0, 5, 23);
  // Rank 0 sends tag 7, then tag 5 twice.
  Add(v1::COLLECTIVE_SEND, 0, 2, 7, 1);
  Add(v1::COLLECTIVE_SEND, 0, 2, 5, 2);
  Add(v1::COLLECTIVE_SEND, 0, 2, 5, 3);
  RemoteMessages::Polled sender = Poll(0);
  ASSERT_THAT(sender.sends, SizeIs(3));
  EXPECT_THAT(sender.refused, IsEmpty());
  std::vector<std::pair<uint64_t, uint64_t>> pairs;  // (send, receive) request ids
  for (const RemoteMessages::MatchedSend& matched : sender.sends) {
    EXPECT_EQ(matched.node, 1);
    EXPECT_EQ(matched.receive.client, nullptr);
    pairs.emplace_back(matched.send.request.request_id(), matched.receive.request.request_id());
    const std::string data = "bytes of send " + std::to_string(matched.send.request.request_id());
    ASSERT_TRUE(nodes_[0]->Answer(matched, data, /*data_follows=*/false).ok());
  }
  // In the order the notices came (the receiver's), each with its send.
  EXPECT_THAT(
      pairs, ElementsAre(std::pair<uint64_t, uint64_t>{2, 21}, std::pair<uint64_t, uint64_t>{1, 22},
                         std::pair<uint64_t, uint64_t>{3, 23}));
  RemoteMessages::Polled receiver = Poll(1);
  ASSERT_THAT(receiver.receives, SizeIs(3));
  for (const RemoteMessages::AnsweredReceive& answered : receiver.receives) {
    EXPECT_TRUE(answered.status.ok()) << answered.status;
    EXPECT_FALSE(answered.data_follows);
    EXPECT_EQ(answered.node, 0);
    EXPECT_EQ(answered.send.rank, 0);
    const uint64_t receive = answered.receive.request.request_id();
    const uint64_t send = receive == 22 ? 1 : receive == 21 ? 2 : 3;
    EXPECT_EQ(answered.data, "bytes of send " + std::to_string(send));
    EXPECT_EQ(answered.send.request.request_id(), send);
  }
  EXPECT_TRUE(nodes_[0]->idle());
  EXPECT_TRUE(nodes_[1]->idle());
}

TEST_F(RemoteMessagesTest, ASendWaitsForItsReceiveAndOtherPairsDoNotMeetIt) {
  Add(v1::COLLECTIVE_SEND, 1, 3, 0, 1);  // node 0 -> node 1
  Add(v1::COLLECTIVE_SEND, 1, 4, 0, 2);  // node 0 -> node 2
  EXPECT_THAT(Poll(0).sends, IsEmpty());
  // Rank 2 receives from rank 1 with tag 0: not rank 3's message.
  Add(v1::COLLECTIVE_RECV, 2, 1, 0, 30);
  EXPECT_THAT(Poll(0).sends, IsEmpty());
  Add(v1::COLLECTIVE_RECV, 4, 1, 0, 40);
  RemoteMessages::Polled sender = Poll(0);
  ASSERT_THAT(sender.sends, SizeIs(1));
  EXPECT_EQ(sender.sends[0].send.request.request_id(), 2u);
  EXPECT_EQ(sender.sends[0].node, 2);
  // Node 0 shows its rank 1's send, and rank 2's receive that waits for
  // rank 1, oldest first.
  const std::vector<WaitingMessage> waiting = nodes_[0]->Waiting();
  ASSERT_THAT(waiting, SizeIs(2));
  EXPECT_EQ(waiting[0].collective, v1::COLLECTIVE_SEND);
  EXPECT_EQ(waiting[0].rank, 1);
  EXPECT_EQ(waiting[0].peer, 3);
  EXPECT_EQ(waiting[0].bytes, 16u);
  EXPECT_EQ(waiting[1].collective, v1::COLLECTIVE_RECV);
  EXPECT_EQ(waiting[1].rank, 2);
  EXPECT_EQ(waiting[1].peer, 1);
  // Node 1's receive from rank 1 waits (its notice sits on node 0).
  const std::vector<WaitingMessage> receiving = nodes_[1]->Waiting();
  ASSERT_THAT(receiving, SizeIs(1));
  EXPECT_EQ(receiving[0].collective, v1::COLLECTIVE_RECV);
  EXPECT_EQ(receiving[0].rank, 2);
  EXPECT_EQ(receiving[0].peer, 1);
}

TEST_F(RemoteMessagesTest, ALargeMessageSaysItsBytesFollowUnderItsOwnTag) {
  Add(v1::COLLECTIVE_RECV, 3, 0, 9, 31, /*elements=*/1 << 20);
  Add(v1::COLLECTIVE_RECV, 3, 0, 9, 32, /*elements=*/1 << 20);
  Add(v1::COLLECTIVE_SEND, 0, 3, 9, 1, /*elements=*/1 << 20);
  Add(v1::COLLECTIVE_SEND, 0, 3, 9, 2, /*elements=*/1 << 20);
  RemoteMessages::Polled sender = Poll(0);
  ASSERT_THAT(sender.sends, SizeIs(2));
  EXPECT_NE(RemoteMessages::DataTag(sender.sends[0].id),
            RemoteMessages::DataTag(sender.sends[1].id));
  for (const RemoteMessages::MatchedSend& matched : sender.sends) {
    ASSERT_TRUE(nodes_[0]->Answer(matched, {}, /*data_follows=*/true).ok());
  }
  RemoteMessages::Polled receiver = Poll(1);
  ASSERT_THAT(receiver.receives, SizeIs(2));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(receiver.receives[i].data_follows);
    EXPECT_TRUE(receiver.receives[i].data.empty());
    EXPECT_EQ(receiver.receives[i].id, sender.sends[i].id);
  }
}

TEST_F(RemoteMessagesTest, AMismatchFailsBothRanksWithTheSameSentence) {
  Add(v1::COLLECTIVE_RECV, 2, 0, 3, 21, /*elements=*/8);
  Add(v1::COLLECTIVE_SEND, 0, 2, 3, 1, /*elements=*/4);
  RemoteMessages::Polled sender = Poll(0);
  EXPECT_THAT(sender.sends, IsEmpty());
  ASSERT_THAT(sender.refused, SizeIs(1));
  const absl::Status& refused = sender.refused[0].second;
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(),
            "Mismatched send and receive of the message from rank 0 to rank 2 with tag 3: rank 0 "
            "sends 16 bytes (a CPU tensor of float32 [4]), rank 2 receives 32 bytes (a CPU "
            "tensor of float32 [8]); a receive must name the send's dtype and byte size");
  RemoteMessages::Polled receiver = Poll(1);
  ASSERT_THAT(receiver.receives, SizeIs(1));
  EXPECT_EQ(receiver.receives[0].status, refused);
  // The next message of that tag is unaffected.
  Add(v1::COLLECTIVE_RECV, 2, 0, 3, 22, /*elements=*/4, v1::DATA_TYPE_FLOAT64);
  Add(v1::COLLECTIVE_SEND, 0, 2, 3, 2, /*elements=*/4, v1::DATA_TYPE_FLOAT64);
  EXPECT_THAT(Poll(0).sends, SizeIs(1));
}

TEST_F(RemoteMessagesTest, AFailedJobOrRemovedSetTakesWhatWaits) {
  Add(v1::COLLECTIVE_SEND, 0, 2, 0, 1);
  Add(v1::COLLECTIVE_RECV, 1, 3, 0, 2);
  job::ProcessSet other = global_;
  other.id = 4;
  Submission odd;
  odd.client = clients_[0].get();
  odd.request.set_request_id(3);
  odd.request.set_collective(v1::COLLECTIVE_SEND);
  odd.request.set_process_set_id(4);
  odd.request.set_peer_rank(4);
  ASSERT_TRUE(nodes_[0]->Add(std::move(odd), other).ok());
  std::vector<uint64_t> announced;
  std::vector<Submission> taken = nodes_[0]->TakeSet(4, &announced);
  ASSERT_THAT(taken, SizeIs(1));
  EXPECT_EQ(taken[0].request.request_id(), 3u);
  EXPECT_THAT(announced, IsEmpty());  // a send: no notice of this node's went out
  taken = nodes_[0]->TakeAll();
  EXPECT_THAT(taken, SizeIs(2));
  EXPECT_TRUE(nodes_[0]->idle());
  EXPECT_THAT(nodes_[0]->Waiting(), IsEmpty());
  // The answer to a receive taken away is dropped; bytes that follow such
  // an answer must still be taken (orphaned).
  Add(v1::COLLECTIVE_SEND, 3, 1, 0, 9);
  RemoteMessages::Polled sender = Poll(1);
  ASSERT_THAT(sender.sends, SizeIs(1));
  ASSERT_TRUE(nodes_[1]->Answer(sender.sends[0], "late", false).ok());
  RemoteMessages::Polled late = Poll(0);
  EXPECT_THAT(late.receives, IsEmpty());
  EXPECT_THAT(late.orphaned, IsEmpty());
  Add(v1::COLLECTIVE_RECV, 1, 3, 1, 10);
  ASSERT_THAT(nodes_[0]->TakeAll(), SizeIs(1));
  Add(v1::COLLECTIVE_SEND, 3, 1, 1, 11, /*elements=*/1 << 20);
  sender = Poll(1);
  EXPECT_THAT(sender.sends, IsEmpty());
  ASSERT_THAT(sender.refused, SizeIs(1));  // 4 MiB against 16 bytes: refused, nothing follows
  Add(v1::COLLECTIVE_RECV, 1, 3, 2, 12, /*elements=*/1 << 20);
  // Taken with its set (the global one here, as a removed set would be): its
  // notice went out, so its answer may still bring bytes.
  announced.clear();
  ASSERT_THAT(nodes_[0]->TakeSet(global_.id, &announced), SizeIs(1));
  ASSERT_THAT(announced, SizeIs(1));
  Add(v1::COLLECTIVE_SEND, 3, 1, 2, 13, /*elements=*/1 << 20);
  sender = Poll(1);
  ASSERT_THAT(sender.sends, SizeIs(1));
  ASSERT_TRUE(nodes_[1]->Answer(sender.sends[0], {}, /*data_follows=*/true).ok());
  late = Poll(0);
  EXPECT_THAT(late.receives, IsEmpty());
  ASSERT_THAT(late.orphaned, SizeIs(1));
  EXPECT_EQ(late.orphaned[0].node, 1);
  EXPECT_EQ(late.orphaned[0].id, sender.sends[0].id);
  EXPECT_EQ(late.orphaned[0].id, announced[0]);
  EXPECT_EQ(late.orphaned[0].send.request.length(), 4u << 20);
  EXPECT_EQ(late.orphaned[0].send.set_rank, 3);
}

}  // namespace
}  // namespace collective::daemon::negotiation
