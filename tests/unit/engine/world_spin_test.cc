// When the engine looks for the other daemons' messages again at once
// rather than sleeping: only while one owes it something, and only for a
// short window after it last made progress.
#include "daemon/engine/world_spin.h"

#include <gtest/gtest.h>

namespace collective::daemon::engine {
namespace {

const Clock::time_point kStart = Clock::time_point{} + std::chrono::hours(1);

TEST(WorldSpinTest, NeverBeforeTheEngineMadeProgress) {
  const WorldSpin spin;
  EXPECT_FALSE(spin.Spins(kStart, /*owed=*/true));
}

TEST(WorldSpinTest, RightAfterProgressWhileAnotherDaemonOwesSomething) {
  WorldSpin spin;
  spin.Worked(kStart);
  EXPECT_TRUE(spin.Spins(kStart, /*owed=*/true));
  EXPECT_TRUE(spin.Spins(kStart + WorldSpin::kWindow / 2, /*owed=*/true));
}

TEST(WorldSpinTest, NotWhenNothingIsOwed) {
  WorldSpin spin;
  spin.Worked(kStart);
  EXPECT_FALSE(spin.Spins(kStart, /*owed=*/false));
}

TEST(WorldSpinTest, TheWindowEndsEvenWhileSomethingIsStillOwed) {
  WorldSpin spin;
  spin.Worked(kStart);
  EXPECT_FALSE(spin.Spins(kStart + WorldSpin::kWindow, /*owed=*/true));
  EXPECT_FALSE(spin.Spins(kStart + std::chrono::seconds(1), /*owed=*/true));
}

TEST(WorldSpinTest, ProgressOpensANewWindow) {
  WorldSpin spin;
  spin.Worked(kStart);
  const Clock::time_point later = kStart + 3 * WorldSpin::kWindow;
  ASSERT_FALSE(spin.Spins(later, /*owed=*/true));
  spin.Worked(later);
  EXPECT_TRUE(spin.Spins(later + WorldSpin::kWindow / 2, /*owed=*/true));
}

}  // namespace
}  // namespace collective::daemon::engine
