// common/logging: the JSON lines log collectors read (stable field names,
// the rank and tensor of a ScopedContext, escaping), captured from stderr.
#include "common/logging.h"

#include <cstdio>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"

namespace collective::log {
namespace {

// What the loggers write to stderr while it lives, as parsed JSON objects.
class CapturedStderr {
 public:
  CapturedStderr() {
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    file_ = std::tmpfile();
    ::dup2(::fileno(file_), STDERR_FILENO);
  }
  ~CapturedStderr() {
    Restore();
    std::fclose(file_);
  }

  std::vector<google::protobuf::Struct> Lines() {
    Restore();
    std::string text;
    std::rewind(file_);
    char buffer[4096];
    for (size_t got; (got = std::fread(buffer, 1, sizeof(buffer), file_)) > 0;) {
      text.append(buffer, got);
    }
    std::vector<google::protobuf::Struct> lines;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      google::protobuf::Struct object;
      const auto parsed = google::protobuf::util::JsonStringToMessage(std::string(line), &object);
      EXPECT_TRUE(parsed.ok()) << parsed.ToString() << ": " << line;
      lines.push_back(object);
    }
    return lines;
  }

 private:
  void Restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }

  int saved_ = -1;
  std::FILE* file_ = nullptr;
};

class JsonLogTest : public ::testing::Test {
 protected:
  void SetUp() override { Configure(LevelSpec{}, Format::kJson); }
  void TearDown() override { Configure(LevelSpec{}, Format::kText); }
};

TEST_F(JsonLogTest, LinesHaveTheStableFields) {
  CapturedStderr captured;
  Coord().warn("plain \"quoted\" line\nwith a\ttab");
  const auto lines = captured.Lines();
  ASSERT_EQ(lines.size(), 1u);
  const auto& fields = lines[0].fields();
  EXPECT_THAT(fields.at("ts").string_value(),
              ::testing::MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z"));
  EXPECT_EQ(fields.at("level").string_value(), "warning");
  EXPECT_EQ(fields.at("subsystem").string_value(), "coord");
  EXPECT_EQ(fields.at("rank").kind_case(), google::protobuf::Value::kNullValue);
  EXPECT_EQ(fields.at("tensor").kind_case(), google::protobuf::Value::kNullValue);
  EXPECT_EQ(fields.at("msg").string_value(), "plain \"quoted\" line\nwith a\ttab");
}

TEST_F(JsonLogTest, ScopedContextNamesTheRankAndTensorUntilItEnds) {
  CapturedStderr captured;
  {
    const ScopedContext outer({.rank = 3});
    Daemon().info("outer");
    {
      const ScopedContext inner({.tensor = "layer\"1\".weight"});
      Exec().error("inner");
    }
    Daemon().info("outer again");
  }
  Daemon().info("none");
  const auto lines = captured.Lines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].fields().at("rank").number_value(), 3);
  EXPECT_EQ(lines[0].fields().at("tensor").kind_case(), google::protobuf::Value::kNullValue);
  // The inner scope replaces the outer one while it lasts.
  EXPECT_EQ(lines[1].fields().at("rank").kind_case(), google::protobuf::Value::kNullValue);
  EXPECT_EQ(lines[1].fields().at("tensor").string_value(), "layer\"1\".weight");
  EXPECT_EQ(lines[1].fields().at("subsystem").string_value(), "exec");
  EXPECT_EQ(lines[2].fields().at("rank").number_value(), 3);
  EXPECT_EQ(lines[3].fields().at("rank").kind_case(), google::protobuf::Value::kNullValue);
}

}  // namespace
}  // namespace collective::log
