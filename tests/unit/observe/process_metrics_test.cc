// process_metrics: /proc/<pid>/stat read as proc(5) lays it out, and the
// process_* series client libraries export, as the daemon's metrics carry them.
#include "daemon/observe/process_metrics.h"

#include <ctime>
#include <string>

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/observe/metrics.h"

namespace collective::daemon::observe {
namespace {

using ::testing::HasSubstr;

TEST(ParseProcStatTest, ReadsTheFieldsAfterTheCommandName) {
  // A command name with a space and a parenthesis; utime 250, stime 150,
  // 7 threads, started 1000 ticks after boot, 4096000 bytes of virtual
  // memory, 300 resident pages.
  const std::string stat =
      "4242 (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 7 0 1000 "
      "4096000 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
  const auto stats = ParseProcStat(stat, 1700000000.0, 100, 4096);
  ASSERT_TRUE(stats.has_value());
  EXPECT_DOUBLE_EQ(stats->cpu_seconds, 4.0);
  EXPECT_EQ(stats->threads, 7u);
  EXPECT_DOUBLE_EQ(stats->start_time_seconds, 1700000010.0);
  EXPECT_EQ(stats->virtual_bytes, 4096000u);
  EXPECT_EQ(stats->resident_bytes, 300u * 4096);
  EXPECT_FALSE(ParseProcStat("4242 (x) S 1 2", 0, 100, 4096).has_value());
  EXPECT_FALSE(ParseProcStat("garbage", 0, 100, 4096).has_value());
}

TEST(ReadProcessStatsTest, DescribesThisProcess) {
  const auto stats = ReadProcessStats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_GT(stats->resident_bytes, 0u);
  EXPECT_GE(stats->open_fds, 3u);  // stdin, stdout, stderr
  EXPECT_GE(stats->max_fds, stats->open_fds);
  EXPECT_GE(stats->threads, 1u);
  EXPECT_LE(stats->start_time_seconds, static_cast<double>(std::time(nullptr)) + 1);
  EXPECT_GT(stats->start_time_seconds, static_cast<double>(std::time(nullptr)) - 86400 * 365);
}

TEST(ProcessMetricsTest, TheDaemonsMetricsCarryTheProcessSeries) {
  const std::string text = Metrics("").Render({.job_state = "idle"});
  for (const char* family :
       {"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ",
        "# TYPE process_open_fds gauge\nprocess_open_fds ",
        "# TYPE process_max_fds gauge\nprocess_max_fds ",
        "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes ",
        "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes ",
        "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds ",
        "# TYPE process_threads gauge\nprocess_threads "}) {
    EXPECT_THAT(text, HasSubstr(family));
  }
  // The daemon's own series stay.
  EXPECT_THAT(text, HasSubstr("collectived_job_state{state=\"idle\"} 1\n"));
}

}  // namespace
}  // namespace collective::daemon::observe
