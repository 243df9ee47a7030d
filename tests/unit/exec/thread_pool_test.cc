// daemon/thread_pool: every item runs exactly once, items really run
// concurrently (the caller included), the pool is reusable, and a 1-thread
// pool runs everything on the caller.
#include "daemon/exec/thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace collective::daemon::exec {
namespace {

constexpr auto kDeadline = std::chrono::seconds(10);

TEST(ThreadPoolTest, SizeCountsTheCaller) {
  EXPECT_EQ(ThreadPool(1).size(), 1u);
  EXPECT_EQ(ThreadPool(4).size(), 4u);
}

TEST(ThreadPoolTest, EveryItemRunsExactlyOnce) {
  ThreadPool pool(4);
  constexpr size_t kItems = 10000;
  std::vector<std::atomic<int>> runs(kItems);
  pool.Run(kItems, [&](size_t i) { runs[i].fetch_add(1); });
  for (size_t i = 0; i < kItems; ++i) ASSERT_EQ(runs[i].load(), 1) << "item " << i;
}

TEST(ThreadPoolTest, ZeroItemsCallNothing) {
  exec::ThreadPool pool(3);
  bool called = false;
  pool.Run(0, [&](size_t) { called = true; });
  EXPECT_FALSE(called);
}

// Items that each wait until `expected` items have started: they can only
// all return if that many run at the same time.
struct Rendezvous {
  std::mutex mutex;
  std::condition_variable arrived;
  size_t started = 0;
  std::set<std::thread::id> threads;

  bool Meet(size_t expected) {
    std::unique_lock lock(mutex);
    ++started;
    threads.insert(std::this_thread::get_id());
    arrived.notify_all();
    return arrived.wait_for(lock, kDeadline, [&] { return started >= expected; });
  }
};

TEST(ThreadPoolTest, ItemsRunConcurrentlyOnEveryThreadIncludingTheCaller) {
  constexpr size_t kThreads = 4;
  exec::ThreadPool pool(kThreads);
  Rendezvous rendezvous;
  std::atomic<int> met{0};
  pool.Run(kThreads, [&](size_t) { met += rendezvous.Meet(kThreads) ? 1 : 0; });
  EXPECT_EQ(met.load(), static_cast<int>(kThreads)) << "items did not overlap";
  EXPECT_EQ(rendezvous.threads.size(), kThreads);
  EXPECT_EQ(rendezvous.threads.count(std::this_thread::get_id()), 1u);
}

TEST(ThreadPoolTest, ReusableAcrossManyRuns) {
  exec::ThreadPool pool(3);
  for (size_t run = 0; run < 500; ++run) {
    const size_t items = run % 37;
    std::vector<std::atomic<int>> runs(items);
    pool.Run(items, [&](size_t i) { runs[i].fetch_add(1); });
    for (size_t i = 0; i < items; ++i) ASSERT_EQ(runs[i].load(), 1) << "run " << run;
  }
  // And still concurrent after all of them.
  Rendezvous rendezvous;
  std::atomic<int> met{0};
  pool.Run(3, [&](size_t) { met += rendezvous.Meet(3) ? 1 : 0; });
  EXPECT_EQ(met.load(), 3);
}

TEST(ThreadPoolTest, RunReturnsOnlyWhenEveryItemHasReturned) {
  exec::ThreadPool pool(4);
  for (int run = 0; run < 50; ++run) {
    std::atomic<int> finished{0};
    pool.Run(64, [&](size_t i) {
      if (i % 7 == 0) std::this_thread::yield();
      finished.fetch_add(1);
    });
    ASSERT_EQ(finished.load(), 64) << "run " << run;
  }
}

TEST(ThreadPoolTest, OneThreadPoolRunsEverythingOnTheCaller) {
  exec::ThreadPool pool(1);
  std::vector<size_t> order;
  std::set<std::thread::id> threads;
  pool.Run(100, [&](size_t i) {
    order.push_back(i);
    threads.insert(std::this_thread::get_id());
  });
  ASSERT_EQ(order.size(), 100u);
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(ThreadPoolTest, DestroysCleanlyWhetherUsedOrNot) {
  { exec::ThreadPool unused(8); }
  exec::ThreadPool used(8);
  std::atomic<int> count{0};
  used.Run(8, [&](size_t) { ++count; });
  EXPECT_EQ(count.load(), 8);
}

}  // namespace
}  // namespace collective::daemon::exec
