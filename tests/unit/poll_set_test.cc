// The launcher's one poll loop: callbacks of what is ready (readable, or
// writable when asked) run, a deadline ends the wait, and a deadline already
// past still looks once (a loop whose deadline stayed behind it must still
// reap the exit it waits for, rather than spin without ever polling).
#include "client/launcher/poll_set.h"

#include <string>

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "client/launcher/unique_fd.h"

namespace collective::launcher {
namespace {

struct Pipe {
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    read_end.Reset(fds[0]);
    write_end.Reset(fds[1]);
  }
  UniqueFd read_end;
  UniqueFd write_end;
};

TEST(PollSetTest, RunsTheCallbacksOfWhatIsReady) {
  Pipe ready, idle;
  ASSERT_EQ(::write(ready.write_end.get(), "x", 1), 1);
  int ran_ready = 0, ran_idle = 0;
  PollSet set;
  set.Add(idle.read_end.get(), [&] { ++ran_idle; });
  set.Add(ready.read_end.get(), [&] { ++ran_ready; });
  EXPECT_TRUE(set.Wait(absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(ran_ready, 1);
  EXPECT_EQ(ran_idle, 0);
}

TEST(PollSetTest, ADeadlineEndsTheWait) {
  Pipe idle;
  bool ran = false;
  PollSet set;
  set.Add(idle.read_end.get(), [&] { ran = true; });
  const absl::Time start = absl::Now();
  EXPECT_FALSE(set.Wait(start + absl::Milliseconds(30)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));
  EXPECT_FALSE(ran);
}

TEST(PollSetTest, ADeadlineAlreadyPastStillLooksOnce) {
  Pipe ready;
  ASSERT_EQ(::write(ready.write_end.get(), "x", 1), 1);
  bool ran = false;
  PollSet set;
  set.Add(ready.read_end.get(), [&] { ran = true; });
  EXPECT_TRUE(set.Wait(absl::Now() - absl::Seconds(1)));
  EXPECT_TRUE(ran) << "what is ready is served even past the deadline";

  Pipe idle;
  PollSet nothing;
  nothing.Add(idle.read_end.get(), [] {});
  EXPECT_FALSE(nothing.Wait(absl::Now() - absl::Seconds(1)));
}

TEST(PollSetTest, WritableMeansThePipeTakesMore) {
  Pipe pipe;
  ASSERT_EQ(::fcntl(pipe.write_end.get(), F_SETFL, O_NONBLOCK), 0);
  bool ran = false;
  PollSet room;
  room.AddWritable(pipe.write_end.get(), [&] { ran = true; });
  EXPECT_TRUE(room.Wait(absl::Now() + absl::Seconds(10)));
  EXPECT_TRUE(ran);

  const std::string chunk(4096, 'x');
  while (::write(pipe.write_end.get(), chunk.data(), chunk.size()) > 0) {
  }
  ran = false;
  PollSet full;
  full.AddWritable(pipe.write_end.get(), [&] { ran = true; });
  EXPECT_FALSE(full.Wait(absl::Now() + absl::Milliseconds(20)));
  EXPECT_FALSE(ran) << "a full pipe takes nothing";
}

}  // namespace
}  // namespace collective::launcher
