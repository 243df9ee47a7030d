// The hosts an elastic job leaves out, as Horovod's driver blacklists them:
// for good without a cooldown range; with one, for a cooldown that doubles
// with each blacklisting, within the range.
#include "client/launcher/host_blacklist.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace collective::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const absl::Time kStart = absl::FromUnixSeconds(1000);

TEST(HostBlacklistTest, WithoutACooldownRangeAHostStaysOutForGood) {
  HostBlacklist blacklist;
  EXPECT_FALSE(blacklist.Contains(3, kStart));
  EXPECT_EQ(blacklist.Add(3, kStart), std::nullopt);
  EXPECT_TRUE(blacklist.Contains(3, kStart + absl::Hours(100)));
  EXPECT_FALSE(blacklist.Contains(2, kStart)) << "only the host named";
  EXPECT_THAT(blacklist.Resurrect(kStart + absl::Hours(100)), IsEmpty());
  EXPECT_TRUE(blacklist.Contains(3, kStart + absl::Hours(10000))) << "no cooldown ends";
}

TEST(HostBlacklistTest, ACooldownDoublesWithEachBlacklistingWithinTheRange) {
  // Horovod: MIN * 2^n + random * MIN, kept within [MIN, MAX].
  HostBlacklist blacklist(CooldownRange{.min_seconds = 2, .max_seconds = 20}, [] { return 0.5; });
  absl::Time now = kStart;
  for (const int seconds : {5, 9, 17, 20, 20}) {
    SCOPED_TRACE(seconds);
    const std::optional<absl::Time> until = blacklist.Add(0, now);
    ASSERT_TRUE(until.has_value());
    EXPECT_EQ(*until - now, absl::Seconds(seconds));
    EXPECT_TRUE(blacklist.Contains(0, *until - absl::Milliseconds(1)));
    EXPECT_TRUE(blacklist.Contains(0, now)) << "out from the moment it is blacklisted";
    EXPECT_THAT(blacklist.Resurrect(*until - absl::Milliseconds(1)), IsEmpty());
    EXPECT_FALSE(blacklist.Contains(0, *until));
    EXPECT_THAT(blacklist.Resurrect(*until), ElementsAre(0)) << "back once its cooldown is over";
    EXPECT_THAT(blacklist.Resurrect(*until), IsEmpty()) << "said once";
    now = *until + absl::Seconds(1);
  }
}

TEST(HostBlacklistTest, AHostBlacklistedAgainDuringItsCooldownKeepsIt) {
  HostBlacklist blacklist(CooldownRange{.min_seconds = 1, .max_seconds = 3600}, [] { return 0.0; });
  const std::optional<absl::Time> first = blacklist.Add(1, kStart);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first - kStart, absl::Seconds(2));
  EXPECT_EQ(blacklist.Add(1, kStart + absl::Seconds(1)), first) << "another worker of the host";
  const std::optional<absl::Time> second = blacklist.Add(1, *first);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(*second - *first, absl::Seconds(4)) << "the second blacklisting doubles it";
}

TEST(HostBlacklistTest, TheRangeIsBoundedAsHorovodBoundsIt) {
  EXPECT_TRUE(CheckCooldownRange({.min_seconds = 1, .max_seconds = 3600}).ok());
  const absl::Status low = CheckCooldownRange({.min_seconds = 0, .max_seconds = 10});
  EXPECT_EQ(low.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(low.message(),
              HasSubstr("Provided cooldown lower limit: 0 cannot be lower than default cooldown "
                        "lower limit: 1"));
  EXPECT_THAT(CheckCooldownRange({.min_seconds = 5, .max_seconds = 3601}).message(),
              HasSubstr("Provided cooldown upper limit: 3601 cannot be higher than default "
                        "cooldown upper limit: 3600"));
}

TEST(HostBlacklistTest, DescribesHowLongAHostStaysOut) {
  EXPECT_EQ(HostBlacklist::Describe(std::nullopt, kStart), "for good");
  EXPECT_EQ(HostBlacklist::Describe(kStart + absl::Milliseconds(4200), kStart), "for 5s");
}

}  // namespace
}  // namespace collective::launcher
