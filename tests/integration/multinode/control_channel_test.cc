// The control channel between two daemons' MPI worlds, without the daemons:
// this binary runs as two MPI processes under mpirun (see CMakeLists.txt),
// node 1 sending and node 0 receiving over Open MPI's TCP transport. Each
// test uses a generation of its own and ends at a barrier, so that no
// message of one test reaches another.
#include "daemon/world/control_channel.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/v1/negotiation.pb.h"
#include "daemon/world/world.h"
#include "gtest/gtest.h"

namespace collective::daemon::world {
namespace {

using negotiation::ControlTag;

World* the_world = nullptr;

v1::Heartbeat Numbered(uint64_t n) {
  v1::Heartbeat message;
  message.set_batches_applied(n);
  return message;
}

// Node 1 sends `messages` (tag, number) to node 0.
void SendAll(ControlChannel& channel,
             const std::vector<std::pair<ControlTag, uint64_t>>& messages) {
  for (const auto& [tag, n] : messages) ASSERT_TRUE(channel.Send(0, tag, Numbered(n)).ok());
}

// Node 0 receives `tag` until `count` messages came (or the deadline); the
// numbers they carry, in arrival order.
std::vector<uint64_t> ReceiveNumbers(ControlChannel& channel, ControlTag tag, size_t count) {
  std::vector<uint64_t> numbers;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (numbers.size() < count && absl::Now() < deadline) {
    std::vector<negotiation::ControlLink::Received> received;
    EXPECT_TRUE(channel.Receive(tag, received).ok());
    for (const auto& message : received) {
      EXPECT_EQ(message.from, 1);
      v1::Heartbeat parsed;
      EXPECT_TRUE(parsed.ParseFromString(message.bytes));
      numbers.push_back(parsed.batches_applied());
    }
  }
  return numbers;
}

// Node 0 tells node 1 that it took everything (a message outside the
// control communicator); node 1 completes its sends (`channels`) meanwhile.
// Then both meet.
void Done(const std::vector<ControlChannel*>& channels) {
  if (the_world->rank() == 0) {
    char done = 1;
    MPI_Send(&done, 1, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
  } else {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    int arrived = 0;
    while (!arrived && absl::Now() < deadline) {
      for (ControlChannel* channel : channels) EXPECT_TRUE(channel->Progress().ok());
      MPI_Iprobe(0, 0, MPI_COMM_WORLD, &arrived, MPI_STATUS_IGNORE);
    }
    if (!arrived) {
      // Waiting on would hang both processes: end them, saying why.
      ADD_FAILURE() << "node 0 did not say within 60 s that it took the messages";
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char done = 0;
    MPI_Recv(&done, 1, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(ControlChannelTest, EachTagGetsItsOwnMessagesInOrder) {
  ControlChannel channel(*the_world, 1);
  if (the_world->rank() == 1) {
    SendAll(channel, {{ControlTag::kHeartbeat, 1},
                      {ControlTag::kJobEvent, 2},
                      {ControlTag::kHeartbeat, 3},
                      {ControlTag::kPeerParts, 4},
                      {ControlTag::kReady, 5},
                      {ControlTag::kHeartbeat, 6}});
  } else {
    // The last one sent first: by then all have arrived, and one look for
    // every tag took them into the other tags' inboxes.
    EXPECT_EQ(ReceiveNumbers(channel, ControlTag::kReady, 1), std::vector<uint64_t>({5}));
    EXPECT_EQ(ReceiveNumbers(channel, ControlTag::kHeartbeat, 3), std::vector<uint64_t>({1, 3, 6}));
    EXPECT_EQ(ReceiveNumbers(channel, ControlTag::kJobEvent, 1), std::vector<uint64_t>({2}));
    EXPECT_EQ(ReceiveNumbers(channel, ControlTag::kPeerParts, 1), std::vector<uint64_t>({4}));
    // Nothing is handed out twice.
    std::vector<negotiation::ControlLink::Received> again;
    for (ControlTag tag : {ControlTag::kReady, ControlTag::kHeartbeat, ControlTag::kJobEvent,
                           ControlTag::kPeerParts}) {
      ASSERT_TRUE(channel.Receive(tag, again).ok());
    }
    EXPECT_TRUE(again.empty());
  }
  Done({&channel});
}

TEST(ControlChannelTest, LeavesOtherTrafficOfTheCommunicatorToItsReader) {
  ControlChannel channel(*the_world, 2);
  if (the_world->rank() == 1) {
    // A stop notice first in line, then the channel's own messages.
    char notice = 1;
    MPI_Send(&notice, 1, MPI_CHAR, 0, World::kStopNoticeTag, the_world->control());
    SendAll(channel, {{ControlTag::kDecisions, 7}, {ControlTag::kHeartbeat, 8}});
  } else {
    EXPECT_EQ(ReceiveNumbers(channel, ControlTag::kDecisions, 1), std::vector<uint64_t>({7}));
    EXPECT_EQ(ReceiveNumbers(channel, ControlTag::kHeartbeat, 1), std::vector<uint64_t>({8}));
    // The notice is still there for the world, which takes it.
    EXPECT_EQ(the_world->TakeStopNotice(), 1);
  }
  Done({&channel});
}

TEST(ControlChannelTest, DropsTheMessagesOfAnotherGeneration) {
  ControlChannel earlier(*the_world, 3);
  ControlChannel channel(*the_world, 4);
  if (the_world->rank() == 1) {
    // In this order: node 0 sees the earlier generation's first.
    SendAll(earlier, {{ControlTag::kHeartbeat, 9}});
    SendAll(channel, {{ControlTag::kHeartbeat, 10}});
  } else {
    EXPECT_EQ(ReceiveNumbers(channel, ControlTag::kHeartbeat, 1), std::vector<uint64_t>({10}));
    std::vector<negotiation::ControlLink::Received> again;
    ASSERT_TRUE(channel.Receive(ControlTag::kHeartbeat, again).ok());
    EXPECT_TRUE(again.empty());
  }
  Done({&earlier, &channel});
}

}  // namespace
}  // namespace collective::daemon::world

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  auto world =
      collective::daemon::world::World::Create(collective::daemon::world::WorldMode::kAuto);
  if (!world.ok() || (*world)->size() != 2) {
    fprintf(
        stderr, "control_channel_test runs as 2 MPI processes (mpirun -np 2): %s\n",
        world.ok() ? "another number of processes" : std::string(world.status().message()).c_str());
    return 2;
  }
  collective::daemon::world::the_world = world->get();
  const int failed = RUN_ALL_TESTS();
  world->reset();  // MPI_Finalize
  return failed;
}
