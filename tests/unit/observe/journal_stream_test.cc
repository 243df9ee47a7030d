// Journald priorities: JOURNAL_STREAM is matched against the stream stderr
// really is, and log lines carry "<N>" (sd-daemon(3)) when asked to.
#include "daemon/observe/journal_stream.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "tests/common/temporary_directory.h"

namespace collective::daemon::observe {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string StreamOf(int fd) {
  struct stat info {};
  EXPECT_EQ(::fstat(fd, &info), 0);
  return absl::StrCat(info.st_dev, ":", info.st_ino);
}

TEST(StreamIsJournalTest, MatchesOnlyTheStreamJournalStreamNames) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  const std::string named = StreamOf(fds[1]);
  EXPECT_TRUE(StreamIsJournal(named.c_str(), fds[1]));
  // The variable, inherited by a process whose stderr goes elsewhere.
  const int elsewhere = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  EXPECT_FALSE(StreamIsJournal(named.c_str(), elsewhere));
  ::close(elsewhere);
  EXPECT_FALSE(StreamIsJournal(nullptr, fds[1]));
  EXPECT_FALSE(StreamIsJournal("", fds[1]));
  EXPECT_FALSE(StreamIsJournal("12", fds[1]));
  EXPECT_FALSE(StreamIsJournal("a:b", fds[1]));
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(UsePriorityPrefixTest, AlwaysAndNeverOverrideTheEnvironment) {
  EXPECT_TRUE(UsePriorityPrefix(config::LogPriorityPrefix::kAlways));
  EXPECT_FALSE(UsePriorityPrefix(config::LogPriorityPrefix::kNever));
  const std::string stderr_stream = StreamOf(STDERR_FILENO);
  ::setenv("JOURNAL_STREAM", stderr_stream.c_str(), 1);
  EXPECT_TRUE(UsePriorityPrefix(config::LogPriorityPrefix::kAuto));
  ::setenv("JOURNAL_STREAM", "1:1", 1);
  EXPECT_FALSE(UsePriorityPrefix(config::LogPriorityPrefix::kAuto));
  ::unsetenv("JOURNAL_STREAM");
  EXPECT_FALSE(UsePriorityPrefix(config::LogPriorityPrefix::kAuto));
}

// The lines the loggers write to stderr while `body` runs.
template <class Body>
std::string CaptureStderr(Body body) {
  testing::TemporaryDirectory directory("journal");
  const std::string path = directory.path() + "/stderr";
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ::dup2(file, STDERR_FILENO);
  ::close(file);
  body();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(PriorityPrefixTest, EachLineStartsWithItsSyslogPriority) {
  const std::string text = CaptureStderr([] {
    log::Configure({}, log::Format::kText, /*priority_prefix=*/true);
    log::Daemon().error("broken");
    log::Rpc().warn("odd");
    log::Daemon().info("fine");
    log::Configure({}, log::Format::kJson, /*priority_prefix=*/true);
    log::Daemon().critical("gone");
    log::Configure({}, log::Format::kText, /*priority_prefix=*/false);
    log::Daemon().info("plain");
  });
  const std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 5u) << text;
  EXPECT_THAT(lines[0], StartsWith("<3>"));
  EXPECT_THAT(lines[0], HasSubstr("daemon: broken"));
  EXPECT_THAT(lines[1], StartsWith("<4>"));
  EXPECT_THAT(lines[2], StartsWith("<6>"));
  EXPECT_THAT(lines[3], StartsWith("<2>{\"ts\":"));
  EXPECT_THAT(lines[4], ::testing::Not(StartsWith("<")));
  EXPECT_EQ(log::SyslogPriority(spdlog::level::debug), 7);
  EXPECT_EQ(log::SyslogPriority(spdlog::level::trace), 7);
}

}  // namespace
}  // namespace collective::daemon::observe
