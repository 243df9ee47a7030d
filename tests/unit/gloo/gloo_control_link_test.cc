// The control link over Gloo among daemons as threads on 127.0.0.1: every
// tag and sizes from nothing to several MB arrive in send order per sender,
// Receive never waits, and a node whose link goes away is named by the
// others' Receive and Progress.
#include "daemon/gloo/gloo_control_link.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/hash_store.h>

#include <gmock/gmock.h>
#include <google/protobuf/wrappers.pb.h>
#include <gtest/gtest.h>

#include "tests/unit/gloo/form_worlds.h"

namespace collective::daemon::gloo {
namespace {

using negotiation::ControlLink;
using negotiation::ControlTag;
using ::testing::HasSubstr;

constexpr auto kWithin = std::chrono::seconds(30);

// A job's worlds and their links, one per node.
class Links {
 public:
  explicit Links(int nodes, const std::string& job = "job") {
    auto formed = testing::FormJob(store_, job, 0, nodes);
    for (auto& world : formed) {
      EXPECT_TRUE(world.ok()) << world.status();
      if (!world.ok()) return;
      worlds_.push_back(*std::move(world));
    }
    for (const auto& world : worlds_) links_.push_back(std::make_unique<GlooControlLink>(*world));
  }

  bool ok() const { return !links_.empty(); }
  GlooControlLink& operator[](int node) { return *links_[static_cast<size_t>(node)]; }
  void Destroy(int node) { links_[static_cast<size_t>(node)].reset(); }

 private:
  ::gloo::rendezvous::HashStore store_;
  std::vector<std::unique_ptr<JobWorld>> worlds_;
  std::vector<std::unique_ptr<GlooControlLink>> links_;
};

// The body of message `seq` from `from` with `tag`, `bytes` long: a pattern
// that tells a byte out of place.
std::string Body(int from, int tag, int seq, size_t bytes) {
  std::string body(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) {
    body[i] = static_cast<char>((i * 31 + static_cast<size_t>(from * 7 + tag * 3 + seq)) % 251);
  }
  return body;
}

google::protobuf::BytesValue Message(const std::string& body) {
  google::protobuf::BytesValue message;
  message.set_value(body);
  return message;
}

const std::vector<size_t>& Sizes() {
  // Around the first transfer's 16 KiB (less the header and the string
  // field's tag and length), and several MB.
  static const std::vector<size_t> sizes = {
      0, 1, 100, 16 * 1024 - 24, 16 * 1024 - 21, 16 * 1024, 200 * 1024, 5 * 1024 * 1024};
  return sizes;
}

TEST(GlooControlLinkTest, EveryTagAndSizeArrivesInOrderPerSender) {
  constexpr int kNodes = 3;
  Links links(kNodes);
  ASSERT_TRUE(links.ok());
  std::vector<std::thread> threads;
  for (int node = 0; node < kNodes; ++node) {
    threads.emplace_back([&, node] {
      GlooControlLink& link = links[node];
      EXPECT_EQ(link.node(), node);
      EXPECT_EQ(link.nodes(), kNodes);
      const Clock::time_point made = Clock::now();
      // Everything to every other node, tag by tag, size by size.
      for (int tag = 1; tag < negotiation::kControlTagEnd; ++tag) {
        for (size_t seq = 0; seq < Sizes().size(); ++seq) {
          for (int to = 0; to < kNodes; ++to) {
            if (to == node) continue;
            const absl::Status sent =
                link.Send(to, static_cast<ControlTag>(tag),
                          Message(Body(node, tag, static_cast<int>(seq), Sizes()[seq])));
            ASSERT_TRUE(sent.ok()) << sent;
          }
        }
      }
      // By tag, by sender: what arrived, in order.
      std::map<int, std::map<int, std::vector<std::string>>> arrived;
      const size_t expected = (kNodes - 1) * Sizes().size() * (negotiation::kControlTagEnd - 1);
      size_t count = 0;
      const Clock::time_point deadline = Clock::now() + kWithin;
      while (count < expected && Clock::now() < deadline) {
        for (int tag = 1; tag < negotiation::kControlTagEnd; ++tag) {
          std::vector<ControlLink::Received> received;
          const absl::Status read = link.Receive(static_cast<ControlTag>(tag), received);
          ASSERT_TRUE(read.ok()) << read;
          for (ControlLink::Received& message : received) {
            google::protobuf::BytesValue parsed;
            ASSERT_TRUE(parsed.ParseFromString(message.bytes));
            arrived[tag][message.from].push_back(parsed.value());
            ++count;
          }
        }
        ASSERT_TRUE(link.Progress().ok());
        std::this_thread::yield();
      }
      ASSERT_EQ(count, expected);
      for (int tag = 1; tag < negotiation::kControlTagEnd; ++tag) {
        for (int from = 0; from < kNodes; ++from) {
          if (from == node) continue;
          const std::vector<std::string>& bodies = arrived[tag][from];
          ASSERT_EQ(bodies.size(), Sizes().size());
          for (size_t seq = 0; seq < Sizes().size(); ++seq) {
            EXPECT_TRUE(bodies[seq] == Body(from, tag, static_cast<int>(seq), Sizes()[seq]))
                << "tag " << tag << " from node " << from << ": message " << seq << " of "
                << Sizes()[seq] << " bytes";
          }
          EXPECT_GT(link.last_heard(from), made);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(GlooControlLinkTest, ReceiveNeverWaitsAndSelfSendsArriveAtOnce) {
  Links links(2);
  ASSERT_TRUE(links.ok());
  const Clock::time_point made = Clock::now();
  std::vector<ControlLink::Received> received;
  ASSERT_TRUE(links[0].Receive(ControlTag::kDecisions, received).ok());
  EXPECT_TRUE(received.empty());
  EXPECT_LE(links[0].last_heard(1), made);

  ASSERT_TRUE(links[0].Send(0, ControlTag::kJobEvent, Message("to myself")).ok());
  ASSERT_TRUE(links[0].Receive(ControlTag::kJobEvent, received).ok());
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].from, 0);

  EXPECT_EQ(links[0].Send(2, ControlTag::kJobEvent, Message("")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(links[0].Receive(static_cast<ControlTag>(0), received).code(),
            absl::StatusCode::kInvalidArgument);
}

// Polls `link` until Receive or Progress fails, or the deadline.
absl::Status FirstFailure(GlooControlLink& link, Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    std::vector<ControlLink::Received> received;
    if (absl::Status read = link.Receive(ControlTag::kHeartbeat, received); !read.ok()) return read;
    if (absl::Status progressed = link.Progress(); !progressed.ok()) return progressed;
    std::this_thread::yield();
  }
  return absl::OkStatus();
}

TEST(GlooControlLinkTest, NodeWhoseLinkGoesAwayIsNamedByTheOthers) {
  constexpr int kNodes = 3;
  Links links(kNodes);
  ASSERT_TRUE(links.ok());
  // Node 2 leaves with a large message to node 0 still queued and one from
  // node 1 on its way to it.
  ASSERT_TRUE(links[2].Send(0, ControlTag::kDecisions, Message(std::string(8 << 20, 'x'))).ok());
  ASSERT_TRUE(links[1].Send(2, ControlTag::kReady, Message(std::string(1 << 20, 'y'))).ok());
  const Clock::time_point start = Clock::now();
  links.Destroy(2);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5)) << "destruction waited on the peers";

  const Clock::time_point deadline = Clock::now() + kWithin;
  for (int node = 0; node < 2; ++node) {
    const absl::Status failure = FirstFailure(links[node], deadline);
    EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable) << failure;
    EXPECT_THAT(failure.message(), HasSubstr("node 2 (host-c) is gone"));
    const absl::Status sent = links[node].Send(2, ControlTag::kHeartbeat, Message(""));
    EXPECT_EQ(sent.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(sent.message(), HasSubstr("node 2 (host-c)"));
  }
  // Nodes 0 and 1 still reach each other; Receive hands over what came and
  // reports the failure with it.
  ASSERT_TRUE(links[0].Send(1, ControlTag::kJobEvent, Message("still here")).ok());
  std::vector<ControlLink::Received> received;
  while (received.empty() && Clock::now() < deadline) {
    EXPECT_FALSE(links[1].Receive(ControlTag::kJobEvent, received).ok());
    std::this_thread::yield();
  }
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].from, 0);
}

// Gloo does not fail the wait on a transfer under way when its pair fails:
// the link must see its peer go wherever in a large message it leaves,
// whether the link was receiving it or sending one (no way to observe the
// transfer, so a spread of moments to leave at).
class PeerLeavingTest : public ::testing::TestWithParam<bool> {};

TEST_P(PeerLeavingTest, DuringALargeMessage) {
  const bool staying_node_sends = GetParam();
  const std::string large(48 << 20, 'l');
  for (const int after_ms : {0, 1, 3, 10, 30}) {
    SCOPED_TRACE(::testing::Message() << "node 1 leaves " << after_ms << " ms after the send");
    Links links(2, "large-" + std::to_string(after_ms));
    ASSERT_TRUE(links.ok());
    if (staying_node_sends) {
      ASSERT_TRUE(links[0].Send(1, ControlTag::kReady, Message(large)).ok());
    } else {
      ASSERT_TRUE(links[1].Send(0, ControlTag::kDecisions, Message(large)).ok());
    }
    const Clock::time_point leave = Clock::now() + std::chrono::milliseconds(after_ms);
    while (Clock::now() < leave) std::this_thread::yield();
    links.Destroy(1);
    const absl::Status failure = FirstFailure(links[0], Clock::now() + kWithin);
    EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable) << failure;
    EXPECT_THAT(failure.message(), HasSubstr("node 1 (host-b) is gone"));
  }
}

INSTANTIATE_TEST_SUITE_P(StayingNode, PeerLeavingTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? std::string("Sends") : std::string("Receives");
                         });

// A job's end: what a node flushed before its link went reaches the others
// before they see it go.
TEST(GlooControlLinkTest, FlushedMessagesArriveBeforeTheNodeIsGone) {
  Links links(2);
  ASSERT_TRUE(links.ok());
  const std::string large = Body(1, 2, 0, 8 << 20);
  ASSERT_TRUE(links[1].Send(0, ControlTag::kDecisions, Message(large)).ok());
  ASSERT_TRUE(links[1].Send(0, ControlTag::kDecisions, Message("last")).ok());
  ASSERT_TRUE(links[1].Flush(Clock::now() + kWithin).ok());
  links.Destroy(1);

  std::vector<ControlLink::Received> received;
  absl::Status status;
  const Clock::time_point deadline = Clock::now() + kWithin;
  while (status.ok() && Clock::now() < deadline) {
    status = links[0].Receive(ControlTag::kDecisions, received);
    std::this_thread::yield();
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("node 1 (host-b) is gone"));
  ASSERT_EQ(received.size(), 2u);
  google::protobuf::BytesValue parsed;
  ASSERT_TRUE(parsed.ParseFromString(received[0].bytes));
  EXPECT_TRUE(parsed.value() == large);
  ASSERT_TRUE(parsed.ParseFromString(received[1].bytes));
  EXPECT_EQ(parsed.value(), "last");
  EXPECT_EQ(links[0].Flush(Clock::now()).code(), absl::StatusCode::kUnavailable);
}

TEST(GlooControlLinkTest, DestructionWithTrafficInFlightIsPrompt) {
  constexpr int kNodes = 2;
  Links links(kNodes);
  ASSERT_TRUE(links.ok());
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(links[0].Send(1, ControlTag::kPeerParts, Message(std::string(2 << 20, 'z'))).ok());
    ASSERT_TRUE(links[1].Send(0, ControlTag::kPeerParts, Message(std::string(2 << 20, 'w'))).ok());
  }
  const Clock::time_point start = Clock::now();
  links.Destroy(0);
  links.Destroy(1);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

// Not a benchmark: the order of magnitude of a small message's round trip
// (the receives are posted ahead, so a send moves at once), for the record.
TEST(GlooControlLinkTest, SmallMessagesRoundTrip) {
  Links links(2);
  ASSERT_TRUE(links.ok());
  constexpr int kRounds = 500;
  const Clock::time_point deadline = Clock::now() + kWithin;
  std::thread echo([&] {
    std::vector<ControlLink::Received> received;
    for (int round = 0; round < kRounds && Clock::now() < deadline;) {
      received.clear();
      ASSERT_TRUE(links[1].Receive(ControlTag::kReady, received).ok());
      for (size_t i = 0; i < received.size(); ++i, ++round) {
        ASSERT_TRUE(links[1].Send(0, ControlTag::kDecisions, Message("pong")).ok());
      }
      std::this_thread::yield();
    }
  });
  const Clock::time_point start = Clock::now();
  int rounds = 0;
  std::vector<ControlLink::Received> received;
  for (; rounds < kRounds && Clock::now() < deadline; ++rounds) {
    ASSERT_TRUE(links[0].Send(1, ControlTag::kReady, Message("ping")).ok());
    received.clear();
    while (received.empty() && Clock::now() < deadline) {
      ASSERT_TRUE(links[0].Receive(ControlTag::kDecisions, received).ok());
      std::this_thread::yield();
    }
    ASSERT_EQ(received.size(), 1u);
  }
  const auto each = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start) /
                    std::max(rounds, 1);
  echo.join();
  EXPECT_EQ(rounds, kRounds);
  RecordProperty("round_trip_us", static_cast<int>(each.count()));
  std::printf("control link round trip: %lld us\n", static_cast<long long>(each.count()));
}

}  // namespace
}  // namespace collective::daemon::gloo
