// exec/node_transport.h's point-to-point half, over the in-process fabric:
// a message's bytes move in pieces of at most the chunk size, in order,
// whichever side starts first, and messages with different tags between
// the same two nodes do not meet each other's pieces.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/exec/node_transport.h"
#include "tests/unit/exec/fake_node_transport.h"

namespace collective::daemon::exec {
namespace {

class MessageTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto group = fabric_.NewGroup(2);
    for (int32_t place = 0; place < 2; ++place) {
      spans_[place].group = group;
      spans_[place].index = place;
      spans_[place].nodes = {0, 1};
      spans_[place].first = {0, 1};
      spans_[place].count = {1, 1};
      transports_.push_back(fabric_.TransportOf(place));
    }
  }

  static bool Done(PendingTransfer& pending) {
    absl::StatusOr<bool> done = pending.Test();
    EXPECT_TRUE(done.ok()) << done.status();
    return done.ok() && *done;
  }

  FakeFabric fabric_;
  job::SetSpan spans_[2];
  std::vector<std::unique_ptr<NodeTransport>> transports_;
};

std::vector<std::byte> Pattern(size_t bytes, int seed) {
  std::vector<std::byte> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return data;
}

TEST_F(MessageTransferTest, ALargeMessageMovesInChunksInOrder) {
  const std::vector<std::byte> sent = Pattern(10000, 7);
  std::vector<std::byte> received(sent.size());
  auto receive =
      transports_[1]->StartReceive(spans_[1], 0, received.data(), received.size(), 1001, 3000);
  ASSERT_TRUE(receive.ok()) << receive.status();
  EXPECT_FALSE(Done(**receive));  // nothing sent yet
  auto send = transports_[0]->StartSend(spans_[0], 1, sent.data(), sent.size(), 1001, 3000);
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_TRUE(Done(**send));
  EXPECT_TRUE(Done(**receive));
  EXPECT_EQ(fabric_.pieces_sent(), 4);  // 3000 + 3000 + 3000 + 1000
  EXPECT_EQ(received, sent);
}

TEST_F(MessageTransferTest, MessagesOfOtherTagsDoNotMeet) {
  const std::vector<std::byte> first = Pattern(5000, 1);
  const std::vector<std::byte> second = Pattern(5000, 2);
  std::vector<std::byte> got_first(first.size());
  std::vector<std::byte> got_second(second.size());
  // The sender starts them in one order, the receiver in the other.
  auto send_first = transports_[0]->StartSend(spans_[0], 1, first.data(), first.size(), 1001, 4096);
  auto send_second =
      transports_[0]->StartSend(spans_[0], 1, second.data(), second.size(), 1002, 4096);
  ASSERT_TRUE(send_first.ok() && send_second.ok());
  auto receive_second =
      transports_[1]->StartReceive(spans_[1], 0, got_second.data(), got_second.size(), 1002, 4096);
  ASSERT_TRUE(receive_second.ok());
  EXPECT_TRUE(Done(**receive_second));
  EXPECT_FALSE(Done(**send_first));
  auto receive_first =
      transports_[1]->StartReceive(spans_[1], 0, got_first.data(), got_first.size(), 1001, 4096);
  ASSERT_TRUE(receive_first.ok());
  EXPECT_TRUE(Done(**receive_first));
  EXPECT_TRUE(Done(**send_first));
  EXPECT_EQ(got_first, first);
  EXPECT_EQ(got_second, second);
}

TEST_F(MessageTransferTest, AnEmptyMessageStillPairsItsHalves) {
  auto send = transports_[0]->StartSend(spans_[0], 1, nullptr, 0, 1003, 4096);
  ASSERT_TRUE(send.ok());
  EXPECT_FALSE(Done(**send));
  auto receive = transports_[1]->StartReceive(spans_[1], 0, nullptr, 0, 1003, 4096);
  ASSERT_TRUE(receive.ok());
  EXPECT_TRUE(Done(**receive));
  EXPECT_TRUE(Done(**send));
}

}  // namespace
}  // namespace collective::daemon::exec
