// When the engine looks for work again at once rather than sleeping: for a
// short window after it ran every request its ranks had submitted, or after
// any progress while another daemon owes it something.
#include "daemon/engine/engine_spin.h"

#include <gtest/gtest.h>

namespace collective::daemon::engine {
namespace {

const Clock::time_point kStart = Clock::time_point{} + std::chrono::hours(1);
constexpr Clock::duration kWindow = std::chrono::microseconds(200);

TEST(EngineSpinTest, NeverBeforeTheEngineMadeProgress) {
  const EngineSpin spin(kWindow);
  EXPECT_FALSE(spin.Spins(kStart, /*owed=*/true));
  EXPECT_FALSE(spin.Spins(kStart, /*owed=*/false));
}

TEST(EngineSpinTest, RightAfterItRanEverySubmittedRequest) {
  EngineSpin spin(kWindow);
  spin.Worked(kStart);
  spin.Drained(kStart);
  EXPECT_TRUE(spin.Spins(kStart, /*owed=*/false));
  EXPECT_TRUE(spin.Spins(kStart + kWindow / 2, /*owed=*/false));
}

TEST(EngineSpinTest, NotAfterProgressThatLeftRequestsWaitingWhenNothingIsOwed) {
  // A submission that waits for the other ranks' (they are computing).
  EngineSpin spin(kWindow);
  spin.Worked(kStart);
  EXPECT_FALSE(spin.Spins(kStart, /*owed=*/false));
}

TEST(EngineSpinTest, RightAfterProgressWhileAnotherDaemonOwesSomething) {
  EngineSpin spin(kWindow);
  spin.Worked(kStart);
  EXPECT_TRUE(spin.Spins(kStart, /*owed=*/true));
  EXPECT_TRUE(spin.Spins(kStart + kWindow / 2, /*owed=*/true));
}

TEST(EngineSpinTest, TheWindowEnds) {
  EngineSpin spin(kWindow);
  spin.Worked(kStart);
  spin.Drained(kStart);
  EXPECT_FALSE(spin.Spins(kStart + kWindow, /*owed=*/true));
  EXPECT_FALSE(spin.Spins(kStart + std::chrono::seconds(1), /*owed=*/true));
}

TEST(EngineSpinTest, LaterProgressOpensANewWindow) {
  EngineSpin spin(kWindow);
  spin.Drained(kStart);
  const Clock::time_point later = kStart + 3 * kWindow;
  ASSERT_FALSE(spin.Spins(later, /*owed=*/false));
  spin.Drained(later);
  EXPECT_TRUE(spin.Spins(later + kWindow / 2, /*owed=*/false));
  spin.Worked(later + kWindow);
  EXPECT_TRUE(spin.Spins(later + kWindow + kWindow / 2, /*owed=*/true));
}

TEST(EngineSpinTest, AZeroWindowNeverSpins) {
  EngineSpin spin(Clock::duration::zero());
  spin.Worked(kStart);
  spin.Drained(kStart);
  EXPECT_FALSE(spin.Spins(kStart, /*owed=*/true));
}

}  // namespace
}  // namespace collective::daemon::engine
