#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "config/config_loader.h"
#include "config/horovod_environment.h"
#include "config/knob_values.h"
#include "config/knobs.h"

namespace collective::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Env = std::map<std::string, std::string>;

const Knob& KnobNamed(absl::string_view name) {
  const Knob* knob = FindKnob(name);
  if (knob == nullptr) ADD_FAILURE() << "no knob " << name;
  return knob != nullptr ? *knob : Knobs().front();
}

// The message of a load that must fail with `code`.
std::string ErrorOf(const absl::StatusOr<EffectiveConfig>& result,
                    absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  EXPECT_FALSE(result.ok()) << "loaded:\n" << (result.ok() ? FormatEffectiveConfig(*result) : "");
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), code) << result.status();
  return std::string(result.status().message());
}

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrReplaceAll(absl::StrCat("config_test_", getpid(), "_", test->test_suite_name(),
                                            "_", test->name()),
                               {{"/", "_"}});
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string WriteFile(absl::string_view name, absl::string_view text) {
    const std::string path = (dir_ / std::string(name)).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // Parses `args` as the daemon's flags, then loads. `default_path` stands
  // in for /etc/collectived/collectived.yaml, which tests never read.
  absl::StatusOr<EffectiveConfig> Load(const std::vector<std::string>& args, const Env& env = {},
                                       const std::string& default_path = "") {
    CLI::App app("collectived");
    ConfigLoader loader(app, default_path);
    // CLI11 takes the arguments last first.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    try {
      app.parse(reversed);
    } catch (const CLI::ParseError& e) {
      ADD_FAILURE() << "flags rejected: " << e.what();
      return absl::InternalError(e.what());
    }
    return loader.Load(env);
  }

  std::filesystem::path dir_;
};

TEST_F(ConfigTest, NothingSetGivesTheDefaults) {
  const auto config = Load({}, {{"PATH", "/usr/bin"}, {"HOME", "/root"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->values, DaemonConfig{});
  EXPECT_EQ(config->file, "");
  EXPECT_EQ(config->sources.size(), Knobs().size());
  for (const Knob& knob : Knobs()) {
    EXPECT_EQ(config->sources.at(std::string(knob.name)), Source::kDefault) << knob.name;
  }
}

TEST_F(ConfigTest, FileThenEnvironmentThenFlagsWin) {
  const std::string file = WriteFile("c.yaml",
                                     "fusion_threshold_bytes: 1MiB\n"
                                     "allowed_uids: [1]\n"
                                     "register_timeout_seconds: 5\n"
                                     "log_level: debug\n"
                                     "log_format: json\n");
  const Env env = {{"COLLECTIVED_FUSION_THRESHOLD_BYTES", "2MiB"},
                   {"COLLECTIVED_ALLOWED_UIDS", "2,3"},
                   {"COLLECTIVED_REGISTER_TIMEOUT_SECONDS", "6"},
                   {"COLLECTIVED_SOCKET", "/tmp/env.sock"}};
  const auto config = Load({"--config", file, "--fusion-threshold-bytes", "3MiB",
                            "--register_timeout_seconds", "7.5", "--reduce-threads", "4"},
                           env);
  ASSERT_TRUE(config.ok()) << config.status();
  const DaemonConfig& v = config->values;
  const auto& sources = config->sources;
  EXPECT_EQ(v.fusion_threshold_bytes, 3 * kMiB);
  EXPECT_EQ(sources.at("fusion_threshold_bytes"), Source::kFlag);
  EXPECT_EQ(v.register_timeout_seconds, 7.5);
  EXPECT_EQ(sources.at("register_timeout_seconds"), Source::kFlag);
  EXPECT_EQ(v.reduce_threads, 4u);
  EXPECT_EQ(sources.at("reduce_threads"), Source::kFlag);
  EXPECT_THAT(v.allowed_uids, ElementsAre(2u, 3u));
  EXPECT_EQ(sources.at("allowed_uids"), Source::kEnvironment);
  EXPECT_EQ(v.socket, "/tmp/env.sock");
  EXPECT_EQ(sources.at("socket"), Source::kEnvironment);
  EXPECT_EQ(v.log_level, "debug");
  EXPECT_EQ(sources.at("log_level"), Source::kFile);
  EXPECT_EQ(v.log_format, LogFormat::kJson);
  EXPECT_EQ(sources.at("log_format"), Source::kFile);
  EXPECT_EQ(v.heartbeat_interval_ms, DaemonConfig{}.heartbeat_interval_ms);
  EXPECT_EQ(sources.at("heartbeat_interval_ms"), Source::kDefault);
  EXPECT_EQ(config->file, file);
}

TEST_F(ConfigTest, HorovodsVariablesSetTheirKnobsBelowOurOwn) {
  const std::string file = WriteFile("c.yaml",
                                     "fusion_threshold_bytes: 1MiB\n"
                                     "response_cache_capacity: 7\n");
  const Env env = {{"HOROVOD_FUSION_THRESHOLD", "33554432"},
                   {"HOROVOD_CACHE_CAPACITY", "0"},
                   {"HOROVOD_CYCLE_TIME", "0.1"},
                   {"HOROVOD_AUTOTUNE", "1"},
                   {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "5"},
                   {"HOROVOD_TIMELINE", "trace.json"},
                   {"HOROVOD_TIMELINE_MARK_CYCLES", "0"},
                   {"HOROVOD_STALL_CHECK_TIME_SECONDS", "30"},
                   {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "90"},
                   {"HOROVOD_LOG_LEVEL", "WARNING"},
                   // Ours win over Horovod's.
                   {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "3"},
                   {"COLLECTIVED_AUTOTUNE_STEPS_PER_SAMPLE", "4"}};
  const auto config = Load({"--config", file}, env);
  ASSERT_TRUE(config.ok()) << config.status();
  const DaemonConfig& v = config->values;
  // Over the file.
  EXPECT_EQ(v.fusion_threshold_bytes, 32 * kMiB);
  EXPECT_EQ(config->sources.at("fusion_threshold_bytes"), Source::kHorovodEnvironment);
  EXPECT_EQ(v.response_cache_capacity, 0u);
  // 0.1 ms rounds up to the engine's whole millisecond.
  EXPECT_EQ(v.cycle_time_ms, 1u);
  EXPECT_TRUE(v.autotune);
  EXPECT_EQ(v.autotune_warmup_samples, 5u);
  EXPECT_EQ(v.autotune_steps_per_sample, 4u);
  EXPECT_EQ(config->sources.at("autotune_steps_per_sample"), Source::kEnvironment);
  // A relative path is taken from the daemon's working directory.
  EXPECT_EQ(v.timeline_file, (std::filesystem::current_path() / "trace.json").string());
  EXPECT_FALSE(v.timeline_mark_cycles);
  EXPECT_EQ(v.stall_check_seconds, 30.0);
  EXPECT_EQ(v.stall_shutdown_seconds, 90.0);
  EXPECT_EQ(v.log_level, "warn");
  // --print-config names the variable.
  EXPECT_THAT(FormatEffectiveConfig(*config), HasSubstr("# env HOROVOD_CYCLE_TIME\n"));
}

TEST_F(ConfigTest, HorovodsSwitchesAndSpecialValues) {
  auto config = Load({}, {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "30"},
                          {"HOROVOD_STALL_CHECK_DISABLE", "1"},
                          {"HOROVOD_TIMELINE", "DYNAMIC"},
                          {"HOROVOD_CYCLE_TIME", "2.5"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->values.stall_check_seconds, 0.0);  // disabled wins
  EXPECT_EQ(config->values.timeline_file, "");         // started by start_timeline, if at all
  EXPECT_EQ(config->sources.at("timeline_file"), Source::kDefault);
  EXPECT_EQ(config->values.cycle_time_ms, 3u);
  config =
      Load({}, {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "30"}, {"HOROVOD_STALL_CHECK_DISABLE", "0"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->values.stall_check_seconds, 30.0);
}

TEST_F(ConfigTest, BadHorovodValuesNameTheVariable) {
  EXPECT_EQ(ErrorOf(Load({}, {{"HOROVOD_CYCLE_TIME", "fast"}})),
            "cycle_time_ms (env HOROVOD_CYCLE_TIME): 'fast' is not a positive number of "
            "milliseconds");
  EXPECT_EQ(ErrorOf(Load({}, {{"HOROVOD_LOG_LEVEL", "loud"}})),
            "log_level (env HOROVOD_LOG_LEVEL): 'loud' is not one of Horovod's levels (TRACE, "
            "DEBUG, INFO, WARNING, ERROR, FATAL)");
  EXPECT_THAT(ErrorOf(Load({}, {{"HOROVOD_FUSION_THRESHOLD", "-1"}})),
              HasSubstr("fusion_threshold_bytes (env HOROVOD_FUSION_THRESHOLD): "));
}

TEST_F(ConfigTest, RepeatedFlagTakesTheLastValue) {
  const auto config = Load({"--max-name-bytes", "10", "--max_name_bytes", "20"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->values.max_name_bytes, 20u);
}

TEST_F(ConfigTest, PrintConfigFlagIsReported) {
  CLI::App app("collectived");
  ConfigLoader loader(app, "");
  EXPECT_FALSE(loader.print_config_requested());
  app.parse(std::vector<std::string>{"--print-config"});
  EXPECT_TRUE(loader.print_config_requested());
}

TEST(ByteSizeTest, AcceptsPowerOfTwoSuffixes) {
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"0", 0},
      {"4096", 4096},
      {"64MiB", 64 * kMiB},
      {"64 MiB", 64 * kMiB},
      {"64mib", 64 * kMiB},
      {"1g", kGiB},
      {"1G", kGiB},
      {"2KiB", 2 * kKiB},
      {"3k", 3 * kKiB},
      {"1t", kTiB},
      {"1TiB", kTiB},
      {" 5M ", 5 * kMiB},
      {"16 GiB", 16 * kGiB},
      {"18446744073709551615", UINT64_MAX}};
  for (const auto& [text, bytes] : cases) {
    const auto parsed = ParseByteSize(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, bytes) << text;
  }
}

TEST(ByteSizeTest, RejectsOtherText) {
  for (const char* text : {"", "MiB", "1.5G", "-1", "1KB", "1 MB", "1 Mi B", "0x10", "1e3",
                           "17179869184GiB", "18446744073709551616", "1,024"}) {
    EXPECT_FALSE(ParseByteSize(text).ok()) << text;
  }
  EXPECT_THAT(std::string(ParseByteSize("1KB").status().message()),
              HasSubstr("K, KiB, M, MiB, G, GiB, T or TiB"));
}

TEST(ByteSizeTest, FormatsWithTheLargestExactUnit) {
  EXPECT_EQ(FormatByteSize(0), "0");
  EXPECT_EQ(FormatByteSize(1536), "1536");
  EXPECT_EQ(FormatByteSize(3 * kKiB), "3KiB");
  EXPECT_EQ(FormatByteSize(64 * kMiB), "64MiB");
  EXPECT_EQ(FormatByteSize(1024 * kGiB), "1TiB");
  for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, 1536 * kKiB, 5 * kTiB, uint64_t{UINT64_MAX}}) {
    EXPECT_EQ(ParseByteSize(FormatByteSize(bytes)).value_or(1), bytes);
  }
}

TEST(SecondsTest, ParsesFiniteNumbersOnly) {
  EXPECT_EQ(ParseSeconds("60").value_or(-1), 60.0);
  EXPECT_EQ(ParseSeconds(" 0.25 ").value_or(-1), 0.25);
  EXPECT_EQ(ParseSeconds("1e3").value_or(-1), 1000.0);
  for (const char* text : {"", "soon", "nan", "inf", "10s", "1,5", "0x10"}) {
    EXPECT_FALSE(ParseSeconds(text).ok()) << text;
  }
  for (double seconds : {0.1, 1.0 / 3, 60.0, 86400.0}) {
    EXPECT_EQ(ParseSeconds(FormatSeconds(seconds)).value_or(-1), seconds);
  }
}

TEST(ListTest, ParsesCommaSeparatedUint32) {
  EXPECT_THAT(ParseUint32List("1000,1001").value(), ElementsAre(1000u, 1001u));
  EXPECT_THAT(ParseUint32List(" 7 , 0 ,4294967295 ").value(), ElementsAre(7u, 0u, 4294967295u));
  EXPECT_THAT(ParseUint32List("").value(), IsEmpty());
  EXPECT_THAT(ParseUint32List("  ").value(), IsEmpty());
  for (const char* text : {"1,,2", "1,", "x", "1;2", "-1", "4294967296", "1 2"}) {
    EXPECT_FALSE(ParseUint32List(text).ok()) << text;
  }
  EXPECT_EQ(FormatUint32List({1, 2, 3}), "1,2,3");
}

TEST_F(ConfigTest, ListsComeAsSequencesOrCommaSeparatedText) {
  const std::string file = WriteFile("c.yaml",
                                     "allowed_uids:\n"
                                     "  - 1000\n"
                                     "  - 1001\n"
                                     "allowed_gids: \"10, 20\"\n");
  auto config = Load({"--config", file});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->values.allowed_uids, ElementsAre(1000u, 1001u));
  EXPECT_THAT(config->values.allowed_gids, ElementsAre(10u, 20u));

  config = Load({"--config", WriteFile("flow.yaml", "allowed_uids: [5, 6]\nallowed_gids: []\n")},
                {{"COLLECTIVED_ALLOWED_GIDS", "7, 8"}}, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->values.allowed_uids, ElementsAre(5u, 6u));
  EXPECT_THAT(config->values.allowed_gids, ElementsAre(7u, 8u));

  config = Load({"--allowed-gids", "1,2"}, {{"COLLECTIVED_ALLOWED_GIDS", "7"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->values.allowed_gids, ElementsAre(1u, 2u));

  EXPECT_THAT(ErrorOf(Load({"--config", WriteFile("bad.yaml", "allowed_uids: [1, [2]]\n")})),
              HasSubstr("allowed_uids"));
  EXPECT_THAT(ErrorOf(Load({"--config", WriteFile("bad2.yaml", "allowed_uids: [1, \"2,3\"]\n")})),
              HasSubstr("single number"));
}

struct BadValue {
  std::string knob;
  std::string value;
  std::string reason;  // part of the expected message
};

void PrintTo(const BadValue& bad, std::ostream* os) { *os << bad.knob << "='" << bad.value << "'"; }

class BadValueTest : public ConfigTest, public ::testing::WithParamInterface<BadValue> {};

TEST_P(BadValueTest, IsRejectedNamingKnobSourceAndReason) {
  const BadValue& bad = GetParam();
  const Knob& knob = KnobNamed(bad.knob);
  const std::string env_error = ErrorOf(Load({}, {{knob.EnvName(), bad.value}}));
  EXPECT_THAT(env_error, HasSubstr(absl::StrCat(bad.knob, " (env ", knob.EnvName(), ")")));
  EXPECT_THAT(env_error, HasSubstr(bad.reason));

  const std::string flag_error = ErrorOf(Load({knob.FlagName(), bad.value}));
  EXPECT_THAT(flag_error, HasSubstr(absl::StrCat(bad.knob, " (flag ", knob.FlagName(), ")")));
  EXPECT_THAT(flag_error, HasSubstr(bad.reason));
}

INSTANTIATE_TEST_SUITE_P(
    EveryRule, BadValueTest,
    ::testing::Values(BadValue{"socket", "", "empty"},
                      BadValue{"socket", "run/c.sock", "not an absolute path"},
                      BadValue{"socket", "/" + std::string(107, 's'), "shorter than 108 bytes"},
                      BadValue{"socket_group", "bad group", "neither a group name nor a group id"},
                      BadValue{"socket_group", "-wheel", "neither a group name"},
                      BadValue{"socket_group", "42abc", "neither a group name"},
                      BadValue{"socket_group", "4294967296", "larger than 4294967295"},
                      BadValue{"allowed_uids", "1000,x", "'x' is not an unsigned integer"},
                      BadValue{"allowed_uids", "-1", "not an unsigned integer"},
                      BadValue{"allowed_gids", "1,,2", "empty value"},
                      BadValue{"allowed_gids", "4294967296", "larger than 4294967295"},
                      BadValue{"log_level", "verbose", "unknown log level 'verbose'"},
                      BadValue{"log_level", "info,nosuch=debug", "unknown subsystem 'nosuch'"},
                      BadValue{"log_format", "xml", "'xml' is not one of text, json"},
                      BadValue{"metrics_listen", "9464", "'9464' is not HOST:PORT (no port)"},
                      BadValue{"metrics_listen", "localhost:99999", "a number 0..65535"},
                      BadValue{"metrics_listen", "::1:9464", "an IPv6 address goes in brackets"},
                      BadValue{"register_timeout_seconds", "0", "not greater than 0"},
                      BadValue{"register_timeout_seconds", "-5", "not greater than 0"},
                      BadValue{"register_timeout_seconds", "86400.5", "above the maximum 86400"},
                      BadValue{"register_timeout_seconds", "soon", "not a number of seconds"},
                      BadValue{"register_timeout_seconds", "nan", "not a number of seconds"},
                      BadValue{"heartbeat_interval_ms", "9", "below the minimum 10"},
                      BadValue{"heartbeat_interval_ms", "60001", "above the maximum 60000"},
                      BadValue{"heartbeat_interval_ms", "1.5", "not an unsigned integer"},
                      BadValue{"heartbeat_interval_ms", "4294967296", "larger than 4294967295"},
                      BadValue{"fusion_threshold_bytes", "1099511627777", "above the maximum 1TiB"},
                      BadValue{"fusion_threshold_bytes", "1.5G", "not a byte size"},
                      BadValue{"default_arena_bytes", "4095", "below the minimum 4KiB"},
                      BadValue{"max_arena_bytes", "2TiB", "above the maximum 1TiB"},
                      BadValue{"result_arena_bytes", "1023KiB", "below the minimum 1MiB"},
                      BadValue{"max_outstanding_requests", "0", "below the minimum 1"},
                      BadValue{"max_outstanding_requests", "1048577", "above the maximum 1048576"},
                      BadValue{"max_name_bytes", "0", "below the minimum 1"},
                      BadValue{"max_name_bytes", "65537", "above the maximum 65536"},
                      BadValue{"reduce_threads", "1025", "above the maximum 1024"},
                      BadValue{"reduce_threads", "-1", "not an unsigned integer"}));

TEST_F(ConfigTest, BoundaryValuesAreAccepted) {
  const std::vector<Env> good = {
      {{"COLLECTIVED_SOCKET", "/" + std::string(106, 's')}},
      {{"COLLECTIVED_SOCKET_GROUP", ""}},
      {{"COLLECTIVED_SOCKET_GROUP", "wheel"}},
      {{"COLLECTIVED_SOCKET_GROUP", "_svc-1.x$"}},
      {{"COLLECTIVED_SOCKET_GROUP", "4242"}},
      {{"COLLECTIVED_ALLOWED_UIDS", ""}},
      {{"COLLECTIVED_LOG_LEVEL", "info,coord=debug,rpc=trace"}},
      {{"COLLECTIVED_LOG_FORMAT", "JSON"}},
      {{"COLLECTIVED_METRICS_LISTEN", ""}},
      {{"COLLECTIVED_METRICS_LISTEN", "0.0.0.0:9464"}},
      {{"COLLECTIVED_METRICS_LISTEN", "[::1]:0"}},
      {{"COLLECTIVED_REGISTER_TIMEOUT_SECONDS", "0.001"}},
      {{"COLLECTIVED_REGISTER_TIMEOUT_SECONDS", "86400"}},
      {{"COLLECTIVED_HEARTBEAT_INTERVAL_MS", "10"}},
      {{"COLLECTIVED_HEARTBEAT_INTERVAL_MS", "60000"}},
      {{"COLLECTIVED_FUSION_THRESHOLD_BYTES", "0"}},
      {{"COLLECTIVED_DEFAULT_ARENA_BYTES", "4KiB"}, {"COLLECTIVED_MAX_ARENA_BYTES", "4KiB"}},
      {{"COLLECTIVED_MAX_ARENA_BYTES", "1TiB"}},
      {{"COLLECTIVED_RESULT_ARENA_BYTES", "1MiB"}, {"COLLECTIVED_FUSION_THRESHOLD_BYTES", "1MiB"}},
      {{"COLLECTIVED_FUSION_THRESHOLD_BYTES", "1TiB"}, {"COLLECTIVED_RESULT_ARENA_BYTES", "1TiB"}},
      {{"COLLECTIVED_MAX_OUTSTANDING_REQUESTS", "1048576"}},
      {{"COLLECTIVED_MAX_NAME_BYTES", "65536"}},
      {{"COLLECTIVED_REDUCE_THREADS", "1024"}},
  };
  for (const Env& env : good) {
    const auto config = Load({}, env);
    ASSERT_TRUE(config.ok()) << absl::StrJoin(env, " ", absl::PairFormatter("=")) << ": "
                             << config.status();
    for (const auto& [variable, value] : env) {
      const std::string name = absl::AsciiStrToLower(absl::StripPrefix(variable, "COLLECTIVED_"));
      EXPECT_EQ(config->sources.at(name), Source::kEnvironment) << name;
    }
  }
  // An empty flag argument is a value too: it clears a list the file set.
  const auto config = Load({"--config", WriteFile("c.yaml", "allowed_gids: [1]\n"),
                            "--allowed-gids", "", "--socket-group", ""});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->values.allowed_gids, IsEmpty());
  EXPECT_EQ(config->sources.at("allowed_gids"), Source::kFlag);
}

TEST_F(ConfigTest, FileErrorsNameThePathAndLine) {
  const std::string file = WriteFile("c.yaml", "socket: /tmp/c.sock\n\nheartbeat_interval_ms: 5\n");
  const std::string error = ErrorOf(Load({"--config", file}));
  EXPECT_THAT(error, HasSubstr(absl::StrCat("heartbeat_interval_ms (file ", file, ":3)")));
  EXPECT_THAT(error, HasSubstr("below the minimum 10"));
}

TEST_F(ConfigTest, CrossKnobRulesNameBothValuesAndSources) {
  const std::string file = WriteFile("c.yaml", "max_arena_bytes: 512MiB\n");
  std::string error =
      ErrorOf(Load({"--config", file}, {{"COLLECTIVED_DEFAULT_ARENA_BYTES", "1GiB"}}));
  EXPECT_THAT(error, HasSubstr("default_arena_bytes must not exceed max_arena_bytes"));
  EXPECT_THAT(error,
              HasSubstr("default_arena_bytes is 1GiB (env COLLECTIVED_DEFAULT_ARENA_BYTES)"));
  EXPECT_THAT(error, HasSubstr(absl::StrCat("max_arena_bytes is 512MiB (file ", file, ":1)")));

  error = ErrorOf(Load({"--fusion-threshold-bytes", "1GiB"}));
  EXPECT_THAT(error, HasSubstr("result_arena_bytes must be at least fusion_threshold_bytes"));
  EXPECT_THAT(error, HasSubstr("result_arena_bytes is 512MiB (default)"));
  EXPECT_THAT(error, HasSubstr("fusion_threshold_bytes is 1GiB (flag --fusion-threshold-bytes)"));
}

TEST_F(ConfigTest, CrossKnobRulesApplyToTheMergedValues) {
  // Each source alone would break a rule; merged they satisfy it.
  const std::string file =
      WriteFile("c.yaml", "default_arena_bytes: 32GiB\nfusion_threshold_bytes: 1GiB\n");
  const auto config = Load({"--config", file, "--result-arena-bytes", "2GiB"},
                           {{"COLLECTIVED_MAX_ARENA_BYTES", "64GiB"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->values.default_arena_bytes, 32 * kGiB);
  EXPECT_EQ(config->values.max_arena_bytes, 64 * kGiB);
}

TEST_F(ConfigTest, UnknownYamlKeySuggestsTheNearestKnob) {
  const std::string file = WriteFile("c.yaml", "log_level: info\nfusion_treshold_bytes: 1MiB\n");
  std::string error = ErrorOf(Load({"--config", file}));
  EXPECT_THAT(error, HasSubstr(absl::StrCat(file, ":2")));
  EXPECT_THAT(error, HasSubstr("unknown knob 'fusion_treshold_bytes'"));
  EXPECT_THAT(error, HasSubstr("did you mean 'fusion_threshold_bytes'?"));

  error = ErrorOf(Load({"--config", WriteFile("dash.yaml", "Max-Name-Bytes: 8\n")}));
  EXPECT_THAT(error, HasSubstr("did you mean 'max_name_bytes'?"));

  error = ErrorOf(Load({"--config", WriteFile("far.yaml", "colour: blue\n")}));
  EXPECT_THAT(error, HasSubstr("unknown knob 'colour'"));
  EXPECT_THAT(error, HasSubstr("knobs: socket, socket_group"));
}

TEST_F(ConfigTest, UnknownEnvironmentVariableSuggestsTheNearestKnob) {
  std::string error = ErrorOf(Load({}, {{"COLLECTIVED_FUSION_TRESHOLD_BYTES", "1"}}));
  EXPECT_THAT(error, HasSubstr("COLLECTIVED_FUSION_TRESHOLD_BYTES"));
  EXPECT_THAT(error, HasSubstr("did you mean COLLECTIVED_FUSION_THRESHOLD_BYTES?"));

  error = ErrorOf(Load({}, {{"COLLECTIVED_ZZZZZZZZZZZZZ", "1"}}));
  EXPECT_THAT(error, HasSubstr("COLLECTIVED_ZZZZZZZZZZZZZ names no knob"));

  // Only the COLLECTIVED_ prefix is ours.
  const auto config = Load({}, {{"COLLECTIVEDX", "1"}, {"collectived_socket", "x"}, {"X", "y"}});
  EXPECT_TRUE(config.ok()) << config.status();
}

TEST_F(ConfigTest, MalformedFilesAreErrorsNamingFileAndLine) {
  std::string file = WriteFile("list.yaml", "- socket\n- log_level\n");
  std::string error = ErrorOf(Load({"--config", file}));
  EXPECT_THAT(error, HasSubstr(absl::StrCat(file, ":1")));
  EXPECT_THAT(error, HasSubstr("expected a mapping of knob names to values, found a sequence"));

  file = WriteFile("scalar.yaml", "just text\n");
  EXPECT_THAT(ErrorOf(Load({"--config", file})), HasSubstr("found a scalar"));

  file = WriteFile("broken.yaml", "log_level: info\nsocket: [unclosed\nreduce_threads: 1\n");
  error = ErrorOf(Load({"--config", file}));
  EXPECT_THAT(error, HasSubstr(absl::StrCat("config file ", file, ":")));
  EXPECT_THAT(error, HasSubstr("not valid YAML"));

  file = WriteFile("twice.yaml", "log_level: info\nlog_level: debug\n");
  error = ErrorOf(Load({"--config", file}));
  EXPECT_THAT(error,
              HasSubstr(absl::StrCat(file, ":2: log_level is set twice (also at ", file, ":1)")));

  file = WriteFile("nested.yaml", "socket:\n  path: /tmp/x.sock\n");
  EXPECT_THAT(ErrorOf(Load({"--config", file})),
              HasSubstr("expected a single value, found a mapping"));

  EXPECT_THAT(ErrorOf(Load({"--config", dir_.string()})), HasSubstr("is a directory"));
}

TEST_F(ConfigTest, EmptyFileSetsNothing) {
  for (const char* text : {"", "# only a comment\n"}) {
    const std::string file = WriteFile("empty.yaml", text);
    const auto config = Load({"--config", file});
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->values, DaemonConfig{});
    EXPECT_EQ(config->file, file);
    EXPECT_EQ(config->sources.at("socket"), Source::kDefault);
  }
}

TEST_F(ConfigTest, MissingConfigFileIsAnError) {
  const std::string missing = (dir_ / "missing.yaml").string();
  const std::string error = ErrorOf(Load({"--config", missing}), absl::StatusCode::kNotFound);
  EXPECT_THAT(error, HasSubstr(absl::StrCat("--config ", missing, ": no such file")));
}

TEST_F(ConfigTest, DefaultFileIsReadOnlyWhenPresent) {
  const std::string default_path = (dir_ / "collectived.yaml").string();
  auto config = Load({}, {}, default_path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->file, "");
  EXPECT_EQ(config->values, DaemonConfig{});

  WriteFile("collectived.yaml", "max_name_bytes: 77\n");
  config = Load({}, {}, default_path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->file, default_path);
  EXPECT_EQ(config->values.max_name_bytes, 77u);
  EXPECT_EQ(config->sources.at("max_name_bytes"), Source::kFile);

  // --config replaces the default file rather than adding to it.
  const std::string other = WriteFile("other.yaml", "reduce_threads: 3\n");
  config = Load({"--config", other}, {}, default_path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->file, other);
  EXPECT_EQ(config->values.reduce_threads, 3u);
  EXPECT_EQ(config->values.max_name_bytes, DaemonConfig{}.max_name_bytes);
}

TEST_F(ConfigTest, FormattedConfigLoadsBackToTheSameValues) {
  const std::string file = WriteFile("c.yaml",
                                     "socket: '/tmp/a \"b\" \\ c: #d.sock'\n"
                                     "socket_group: \"yes\"\n"
                                     "allowed_uids: [1, 2]\n"
                                     "log_level: info,coord=debug\n"
                                     "register_timeout_seconds: 0.1\n");
  const auto first = Load({"--config", file, "--fusion-threshold-bytes", "3"},
                          {{"COLLECTIVED_LOG_FORMAT", "json"}});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->values.socket, "/tmp/a \"b\" \\ c: #d.sock");

  const std::string text = FormatEffectiveConfig(*first);
  EXPECT_TRUE(absl::StartsWith(
      text, absl::StrCat("# collectived effective configuration; file: ", file, "\n")))
      << text;
  EXPECT_THAT(text, HasSubstr("fusion_threshold_bytes: 3  "));
  EXPECT_THAT(text, HasSubstr("# flag --fusion-threshold-bytes\n"));
  EXPECT_THAT(text, HasSubstr("log_format: json  "));
  EXPECT_THAT(text, HasSubstr("# env COLLECTIVED_LOG_FORMAT\n"));
  EXPECT_THAT(text, HasSubstr("allowed_uids: [1, 2]  "));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("# file ", file, "\n")));
  EXPECT_THAT(text, HasSubstr("reduce_threads: 0  "));
  EXPECT_THAT(text, HasSubstr("# default\n"));

  // One line per knob, in table order.
  std::vector<std::string> keys;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "#")) keys.emplace_back(line.substr(0, line.find(':')));
  }
  std::vector<std::string> names;
  for (const Knob& knob : Knobs()) names.emplace_back(knob.name);
  EXPECT_EQ(keys, names);

  const auto again = Load({"--config", WriteFile("printed.yaml", text)});
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(again->values, first->values) << text << "\nreloaded as\n"
                                          << FormatEffectiveConfig(*again);
}

TEST_F(ConfigTest, EveryDefaultIsValidAndFormatsBack) {
  const DaemonConfig defaults;
  for (const Knob& knob : Knobs()) {
    DaemonConfig config = defaults;
    EXPECT_TRUE(knob.parse(knob.format(defaults), config).ok()) << knob.name;
    EXPECT_TRUE(knob.parse(knob.format_readable(defaults), config).ok()) << knob.name;
    EXPECT_EQ(config, defaults) << knob.name;
  }
  for (const KnobRule& rule : KnobRules()) {
    EXPECT_TRUE(rule.holds(defaults)) << rule.requirement;
    for (absl::string_view name : rule.knobs) EXPECT_NE(FindKnob(name), nullptr) << name;
  }
}

TEST(KnobTableTest, NamesDeriveEnvironmentAndFlagNames) {
  const Knob& knob = KnobNamed("fusion_threshold_bytes");
  EXPECT_EQ(knob.EnvName(), "COLLECTIVED_FUSION_THRESHOLD_BYTES");
  EXPECT_EQ(knob.FlagName(), "--fusion-threshold-bytes");
  std::map<absl::string_view, int> seen;
  for (const Knob& k : Knobs()) {
    EXPECT_EQ(++seen[k.name], 1) << k.name;
    EXPECT_EQ(k.name, absl::AsciiStrToLower(k.name));
    EXPECT_FALSE(k.description.empty()) << k.name;
    EXPECT_FALSE(k.section.empty()) << k.name;
  }
}

TEST(KnobTableTest, HelpListsEveryKnobWithItsEnvironmentVariable) {
  CLI::App app("collectived");
  ConfigLoader loader(app, "/etc/collectived/collectived.yaml");
  const std::string help = app.help();
  for (const Knob& knob : Knobs()) {
    EXPECT_THAT(help, HasSubstr(knob.FlagName())) << knob.name;
    EXPECT_THAT(help, HasSubstr(knob.EnvName())) << knob.name;
    EXPECT_THAT(help, HasSubstr(std::string(knob.section))) << knob.name;
  }
  EXPECT_THAT(help, HasSubstr("--print-config"));
  EXPECT_THAT(help, HasSubstr("--config"));
}

std::string NormalizeSpaces(absl::string_view text) {
  return absl::StrJoin(absl::StrSplit(text, absl::ByAnyChar(" \t\n"), absl::SkipEmpty()), " ");
}

TEST(ShippedConfigTest, LoadsToExactlyTheDefaults) {
  const std::string path = COLLECTIVE_SOURCE_DIR "/config/collectived.yaml";
  CLI::App app("collectived");
  ConfigLoader loader(app, "");
  app.parse(std::vector<std::string>{path, "--config"});
  const auto config = loader.Load({});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->values, DaemonConfig{}) << FormatEffectiveConfig(*config);
  for (const Knob& knob : Knobs()) {
    EXPECT_EQ(config->sources.at(std::string(knob.name)), Source::kFile)
        << knob.name << " is missing from " << path;
  }
}

// Each knob's key line is preceded by a comment block that holds its
// description, type, valid values and default, as the table declares them.
TEST(ShippedConfigTest, DocumentsEveryKnobAsTheTableDeclaresIt) {
  const std::string path = COLLECTIVE_SOURCE_DIR "/config/collectived.yaml";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);

  const DaemonConfig defaults;
  size_t previous_line = 0;
  absl::string_view previous_section;
  for (const Knob& knob : Knobs()) {
    SCOPED_TRACE(knob.name);
    size_t at = 0;
    int found = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (absl::StartsWith(lines[i], absl::StrCat(knob.name, ":"))) {
        at = i;
        ++found;
      }
    }
    ASSERT_EQ(found, 1);
    EXPECT_GT(at, previous_line) << "knobs are not in table order";
    std::string comments;
    for (size_t i = at; i > 0 && absl::StartsWith(lines[i - 1], "#"); --i) {
      comments = absl::StrCat(absl::StripPrefix(lines[i - 1], "#"), " ", comments);
    }
    comments = NormalizeSpaces(comments);
    EXPECT_THAT(comments, HasSubstr(NormalizeSpaces(knob.description)));
    EXPECT_THAT(comments,
                HasSubstr(absl::StrCat("Type: ", KnobTypeName(knob.type), ", ", knob.accepts)));
    const std::string readable = knob.format_readable(defaults);
    EXPECT_THAT(comments,
                HasSubstr(absl::StrCat("Default: ", readable.empty() ? "empty" : readable)));
    if (knob.section != previous_section) {
      const std::string heading = absl::StrCat("# --- ", knob.section, " ");
      bool heading_found = false;
      for (size_t i = previous_line; i < at; ++i) {
        heading_found = heading_found || absl::StartsWith(lines[i], heading);
      }
      EXPECT_TRUE(heading_found) << "no heading '" << heading << "' before " << knob.name;
      previous_section = knob.section;
    }
    previous_line = at;
  }
}

// The manual's configuration reference (docs/configuration.md) has a row for
// every knob.
TEST(ReadmeTest, ConfigurationReferenceListsEveryKnob) {
  const std::string path = COLLECTIVE_SOURCE_DIR "/docs/configuration.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (const Knob& knob : Knobs()) {
    const std::string row = absl::StrCat("| `", knob.name, "` |");
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(),
                            [&](const std::string& line) { return absl::StartsWith(line, row); }))
        << path << " has no configuration row for " << knob.name;
  }
}

// ... and one for every Horovod variable that sets a knob.
TEST(ReadmeTest, ConfigurationReferenceListsEveryHorovodVariable) {
  const std::string path = COLLECTIVE_SOURCE_DIR "/docs/configuration.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  for (const HorovodVariable& variable : HorovodVariables()) {
    ASSERT_NE(FindKnob(variable.knob), nullptr) << variable.variable;
    EXPECT_THAT(text.str(),
                HasSubstr(absl::StrCat("| `", variable.variable, "` | `", variable.knob, "` |")))
        << path << " has no row for " << variable.variable;
  }
}

TEST(ProcessEnvironmentTest, ReadsTheEnvironment) {
  ASSERT_EQ(setenv("COLLECTIVED_CONFIG_TEST_PROBE", "a=b", 1), 0);
  const auto environment = ProcessEnvironment();
  unsetenv("COLLECTIVED_CONFIG_TEST_PROBE");
  ASSERT_EQ(environment.count("COLLECTIVED_CONFIG_TEST_PROBE"), 1u);
  EXPECT_EQ(environment.at("COLLECTIVED_CONFIG_TEST_PROBE"), "a=b");
}

}  // namespace
}  // namespace collective::config
