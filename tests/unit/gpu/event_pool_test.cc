// daemon/gpu/event_pool: a slot belongs to one request at a time, and its
// sequence numbers only grow, so that an event is never recorded again
// before the other side consumed it.
#include "daemon/gpu/event_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace collective::daemon::gpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

EventPool PoolOf(int slots) {
  EventPool pool;
  for (int i = 0; i < slots; ++i) pool.Add(100 + 2 * i, 101 + 2 * i);
  return pool;
}

TEST(EventPoolTest, ASlotServesOneRequestAtATime) {
  EventPool pool = PoolOf(2);
  ASSERT_TRUE(pool.Acquire(0, 1).ok());
  ASSERT_TRUE(pool.Acquire(1, 2).ok());
  EXPECT_EQ(pool.held(), 2u);

  const absl::Status busy = pool.Acquire(0, 3);
  ASSERT_EQ(busy.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(busy.message(), HasSubstr("slot 0 is still held by request number 1"));

  pool.Release(0);
  EXPECT_EQ(pool.held(), 1u);
  ASSERT_TRUE(pool.Acquire(0, 3).ok()) << "free again once its request completed";
  EXPECT_EQ(pool.slot(0).last_sequence, 3u);
  EXPECT_EQ(pool.slot(0).ready, 100u);
  EXPECT_EQ(pool.slot(0).done, 101u);
}

TEST(EventPoolTest, SequenceNumbersOfASlotOnlyGrow) {
  EventPool pool = PoolOf(1);
  ASSERT_TRUE(pool.Acquire(0, 5).ok());
  pool.Release(0);
  for (uint64_t stale : {uint64_t{5}, uint64_t{4}, uint64_t{0}}) {
    const absl::Status replay = pool.Acquire(0, stale);
    ASSERT_EQ(replay.code(), absl::StatusCode::kInvalidArgument) << stale;
    EXPECT_THAT(replay.message(), HasSubstr("does not follow the slot's last one, 5"));
  }
  EXPECT_EQ(pool.held(), 0u) << "a refused request takes nothing";
  EXPECT_TRUE(pool.Acquire(0, 9).ok()) << "numbers may skip (other slots took them)";
}

TEST(EventPoolTest, RefusesSlotsThatDoNotExist) {
  EventPool pool = PoolOf(2);
  const absl::Status missing = pool.Acquire(2, 1);
  ASSERT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("slot 2 does not exist (the client registered 2)"));
  pool.Release(7);  // harmless
  EXPECT_EQ(pool.held(), 0u);
}

TEST(EventPoolTest, GrowsAndTruncatesReturningTheEventsToClose) {
  EventPool pool = PoolOf(3);
  ASSERT_TRUE(pool.Acquire(0, 1).ok());
  EXPECT_THAT(pool.TruncateTo(1), ElementsAre(102, 103, 104, 105));
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_TRUE(pool.slot(0).held) << "the slots kept keep their state";
  pool.Add(7, 8);
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_THAT(pool.TruncateTo(0), ElementsAre(100, 101, 7, 8));
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_TRUE(pool.TruncateTo(0).empty());
}

}  // namespace
}  // namespace collective::daemon::gpu
