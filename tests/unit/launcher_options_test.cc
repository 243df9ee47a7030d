// client/launcher/launcher_options: the command line (mpirun's -np, where
// the command starts, usage errors) and what the environment adds to it.
#include "client/launcher/launcher_options.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/launcher/horovodrun_flags.h"
#include "collective/build_config.h"

namespace collective::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Parsed {
  std::variant<LauncherOptions, int> result;
  std::string out;
  std::string err;

  bool ok() const { return std::holds_alternative<LauncherOptions>(result); }
  const LauncherOptions& options() const { return std::get<LauncherOptions>(result); }
  int exit_code() const { return std::get<int>(result); }
};

Parsed Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "collectiverun");
  std::ostringstream out;
  std::ostringstream err;
  Parsed parsed{ParseLauncherOptions(args, out, err), "", ""};
  parsed.out = out.str();
  parsed.err = err.str();
  return parsed;
}

TEST(LauncherOptionsTest, MpiStyleNpAndTheCommandKeepsItsOwnOptions) {
  const Parsed parsed = Parse({"-np", "4", "python", "-u", "train.py", "--flag", "-np", "3"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  EXPECT_EQ(parsed.options().ranks, 4);
  EXPECT_THAT(parsed.options().command,
              ElementsAre("python", "-u", "train.py", "--flag", "-np", "3"));
  EXPECT_TRUE(parsed.options().prefix_output);
  EXPECT_FALSE(parsed.options().verbose);
  EXPECT_EQ(parsed.options().grace_seconds, 10);
}

TEST(LauncherOptionsTest, EveryFormOfTheRankCount) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"-n", "3", "x"},
                                             {"-n3", "x"},
                                             {"--np", "3", "x"},
                                             {"--np=3", "x"},
                                             {"-np", "3", "x"},
                                             {"-np=3", "x"}}) {
    const Parsed parsed = Parse(args);
    ASSERT_TRUE(parsed.ok()) << args[0] << ": " << parsed.err;
    EXPECT_EQ(parsed.options().ranks, 3) << args[0];
    EXPECT_THAT(parsed.options().command, ElementsAre("x")) << args[0];
  }
}

TEST(LauncherOptionsTest, EveryOption) {
  const Parsed parsed =
      Parse({"--socket", "/run/x.sock", "--daemon-arg", "--log-level=debug", "-np", "2",
             "--daemon-arg=--fusion-threshold-bytes=1MiB", "--daemon", "/opt/collectived",
             "--job-id", "j1", "--no-prefix", "--grace-seconds", "0.5", "--verbose", "cmd"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  const LauncherOptions& options = parsed.options();
  EXPECT_EQ(options.ranks, 2);
  EXPECT_EQ(options.socket, "/run/x.sock");
  EXPECT_EQ(options.daemon, "/opt/collectived");
  EXPECT_THAT(options.daemon_args,
              ElementsAre("--log-level=debug", "--fusion-threshold-bytes=1MiB"));
  EXPECT_EQ(options.job_id, "j1");
  EXPECT_FALSE(options.prefix_output);
  EXPECT_EQ(options.grace_seconds, 0.5);
  EXPECT_TRUE(options.verbose);
  EXPECT_THAT(options.command, ElementsAre("cmd"));
}

TEST(LauncherOptionsTest, DoubleDashStartsACommandThatLooksLikeAnOption) {
  const Parsed parsed = Parse({"-np", "2", "--", "--weird", "-np"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  EXPECT_THAT(parsed.options().command, ElementsAre("--weird", "-np"));
}

TEST(LauncherOptionsTest, UsageErrorsExitWith2AndSayWhy) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const Case cases[] = {
      {{"python", "x.py"}, "--np is required"},
      {{"-np", "2"}, "no command given"},
      {{"-np", "2", "--"}, "no command given"},
      {{"-np", "0", "x"}, "--np"},
      {{"-np", "1025", "x"}, "--np"},
      {{"-np", "two", "x"}, "--np"},
      {{"-np", "2", "--bogus", "x"}, "unknown option --bogus"},
      {{"-np", "2", "--grace-seconds", "-1", "x"}, "--grace-seconds"},
  };
  for (const Case& c : cases) {
    const Parsed parsed = Parse(c.args);
    ASSERT_FALSE(parsed.ok()) << c.args.back();
    EXPECT_EQ(parsed.exit_code(), 2) << c.args.back();
    EXPECT_THAT(parsed.err, HasSubstr(c.says));
  }
}

TEST(LauncherOptionsTest, ElasticBoundsDefaultToTheRankCount) {
  const Parsed plain = Parse({"-np", "3", "--elastic", "x"});
  ASSERT_TRUE(plain.ok()) << plain.err;
  EXPECT_TRUE(plain.options().elastic);
  EXPECT_EQ(plain.options().min_ranks, 3);
  EXPECT_EQ(plain.options().max_ranks, 3);
  EXPECT_EQ(plain.options().restarts, 0);
  EXPECT_EQ(plain.options().reset_limit, -1);
  const Parsed bounded =
      Parse({"--elastic", "--min-np", "2", "--max-np", "5", "-np", "3", "--restart-failed", "4",
             "--reset-limit", "6", "python", "--min-np", "9"});
  ASSERT_TRUE(bounded.ok()) << bounded.err;
  EXPECT_EQ(bounded.options().min_ranks, 2);
  EXPECT_EQ(bounded.options().max_ranks, 5);
  EXPECT_EQ(bounded.options().restarts, 4);
  EXPECT_EQ(bounded.options().reset_limit, 6);
  EXPECT_THAT(bounded.options().command, ElementsAre("python", "--min-np", "9"));
}

// As in horovodrun, --min-np makes a job elastic; on -H's hosts it runs as
// on a discovery script that always lists them, up to every slot.
TEST(LauncherOptionsTest, MinNpMakesTheJobElasticAndHostsAreItsDiscovery) {
  const Parsed parsed = Parse({"-np", "2", "--min-np", "2", "-H", "localhost:2,127.0.0.1:2",
                               "--blacklist-cooldown-range", "1", "2", "python", "train.py"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  EXPECT_TRUE(parsed.options().elastic);
  EXPECT_EQ(parsed.options().min_ranks, 2);
  EXPECT_EQ(parsed.options().max_ranks, 1024) << "every slot, as Horovod's unbounded --max-np";
  EXPECT_EQ(parsed.options().hosts_source, "-H");
  ASSERT_TRUE(parsed.options().blacklist_cooldown.has_value());
  LauncherOptions options = parsed.options();
  ASSERT_TRUE(ApplyEnvironment({}, options).ok());
  EXPECT_EQ(options.elastic_timeout_seconds, 600);
  const Parsed plain = Parse({"-np", "2", "-H", "localhost:2", "x"});
  ASSERT_TRUE(plain.ok()) << plain.err;
  EXPECT_FALSE(plain.options().elastic) << "-H alone is a fixed job";
}

TEST(LauncherOptionsTest, ElasticUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const Case cases[] = {
      {{"-np", "2", "--max-np", "3", "x"}, "need --elastic"},
      {{"-np", "2", "--restart-failed", "1", "x"}, "need --elastic"},
      {{"-np", "2", "--reset-limit", "1", "x"}, "need --elastic"},
      {{"-np", "2", "--elastic", "--min-np", "3", "x"}, "--min-np <= -np <= --max-np"},
      {{"-np", "4", "--elastic", "--max-np", "3", "x"}, "but they are 4, 4 and 3"},
  };
  for (const Case& c : cases) {
    const Parsed parsed = Parse(c.args);
    ASSERT_FALSE(parsed.ok()) << c.says;
    EXPECT_EQ(parsed.exit_code(), 2);
    EXPECT_THAT(parsed.err, HasSubstr(c.says));
  }
}

TEST(LauncherOptionsTest, HelpExitsWith0AndShowsTheUsage) {
  const Parsed parsed = Parse({"--help"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.exit_code(), 0);
  EXPECT_THAT(parsed.out, HasSubstr("Usage: collectiverun -np N [OPTIONS] [--] COMMAND [ARGS...]"));
  EXPECT_THAT(parsed.out, HasSubstr("When some are other machines, collectiverun runs\nthe job as "
                                    "horovodrun does through mpirun"));
}

LauncherOptions Options(std::vector<std::string> args) {
  const Parsed parsed = Parse(std::move(args));
  EXPECT_TRUE(parsed.ok()) << parsed.err;
  return parsed.ok() ? parsed.options() : LauncherOptions{};
}

TEST(LauncherOptionsTest, EnvironmentFillsInTheSocketAndTheJobId) {
  LauncherOptions options = Options({"-np", "2", "x"});
  ASSERT_TRUE(
      ApplyEnvironment({{"COLLECTIVE_SOCKET", "/run/a.sock"}, {"COLLECTIVE_JOB_ID", "j"}}, options)
          .ok());
  EXPECT_EQ(options.socket, "/run/a.sock");
  EXPECT_EQ(options.job_id, "j");

  // Flags win; a relative socket becomes absolute.
  options = Options({"-np", "2", "--socket", "rel.sock", "--job-id", "mine", "x"});
  ASSERT_TRUE(
      ApplyEnvironment({{"COLLECTIVE_SOCKET", "/run/a.sock"}, {"COLLECTIVE_JOB_ID", "j"}}, options)
          .ok());
  EXPECT_EQ(options.socket.front(), '/');
  EXPECT_THAT(options.socket, ::testing::EndsWith("/rel.sock"));
  EXPECT_EQ(options.job_id, "mine");

  // Neither: a private daemon and a fresh job id, decided later.
  options = Options({"-np", "2", "x"});
  ASSERT_TRUE(ApplyEnvironment({{"COLLECTIVE_SOCKET", ""}}, options).ok());
  EXPECT_EQ(options.socket, "");
  EXPECT_EQ(options.job_id, "");
}

TEST(LauncherOptionsTest, RefusesWhatCannotWork) {
  LauncherOptions options = Options({"-np", "2", "--daemon-arg=--log-level=debug", "x"});
  absl::Status status = ApplyEnvironment({{"COLLECTIVE_SOCKET", "/run/a.sock"}}, options);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("/run/a.sock"));

  options = Options({"-np", "2", "--daemon-arg=--socket=/tmp/s", "x"});
  status = ApplyEnvironment({}, options);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  // --socket-group is another knob, and fine.
  options = Options({"-np", "2", "--daemon-arg=--socket-group=users", "x"});
  EXPECT_TRUE(ApplyEnvironment({}, options).ok());

  for (const char* mpi : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    options = Options({"-np", "2", "x"});
    status = ApplyEnvironment({{mpi, "2"}}, options);
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << mpi;
    EXPECT_THAT(status.message(), HasSubstr("mpirun or srun")) << mpi;
  }
}

// horovodrun's tuning flags become the HOROVOD_* variables horovodrun sets.
TEST(LauncherOptionsTest, HorovodrunsTuningFlagsSetItsVariables) {
  const Parsed parsed = Parse({"-np",
                               "2",
                               "--fusion-threshold-mb",
                               "32",
                               "--cycle-time-ms",
                               "2.5",
                               "--cache-capacity",
                               "0",
                               "--timeline-filename",
                               "t.json",
                               "--timeline-mark-cycles",
                               "--no-stall-check",
                               "--stall-check-warning-time-seconds",
                               "30",
                               "--stall-check-shutdown-time-seconds",
                               "90",
                               "--autotune",
                               "--autotune-log-file",
                               "a.csv",
                               "--autotune-warmup-samples",
                               "2",
                               "--autotune-steps-per-sample",
                               "5",
                               "--autotune-bayes-opt-max-samples",
                               "10",
                               "--log-level",
                               "warning",
                               "--hierarchical-allreduce",
                               "--gloo",
                               "--disable-cache",
                               "--tcp",
                               "python",
                               "train.py",
                               "--autotune"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  EXPECT_THAT(parsed.options().command, ElementsAre("python", "train.py", "--autotune"));
  EXPECT_EQ(parsed.options().horovod_variables,
            (std::map<std::string, std::string>{
                {"HOROVOD_AUTOTUNE", "1"},
                {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "10"},
                {"HOROVOD_AUTOTUNE_LOG", "a.csv"},
                {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "5"},
                {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "2"},
                {"HOROVOD_CACHE_CAPACITY", "0"},
                {"HOROVOD_CYCLE_TIME", "2.5"},
                {"HOROVOD_FUSION_THRESHOLD", "33554432"},
                {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"},
                {"HOROVOD_LOG_LEVEL", "warning"},
                {"HOROVOD_STALL_CHECK_DISABLE", "1"},
                {"HOROVOD_STALL_CHECK_TIME_SECONDS", "30"},
                {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "90"},
                {"HOROVOD_TIMELINE", "t.json"},
                {"HOROVOD_TIMELINE_MARK_CYCLES", "1"},
                {"NCCL_IB_DISABLE", "1"},
            }));
  EXPECT_TRUE(Parse({"-np", "2", "x"}).options().horovod_variables.empty());

  // They override the same variables from the environment, as horovodrun's do.
  const Environment environment = JobEnvironment(
      parsed.options(),
      {{"HOROVOD_CYCLE_TIME", "5"}, {"HOROVOD_FUSION_THRESHOLD", "1"}, {"PATH", "/bin"}});
  EXPECT_EQ(environment.at("HOROVOD_CYCLE_TIME"), "2.5");
  EXPECT_EQ(environment.at("HOROVOD_FUSION_THRESHOLD"), "33554432");
  EXPECT_EQ(environment.at("PATH"), "/bin");

  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--fusion-threshold-mb", "1.5"},
                                             {"--fusion-threshold-mb", "-1"},
                                             {"--cycle-time-ms", "0"},
                                             {"--cache-capacity", "many"},
                                             {"--log-level", "LOUD"}}) {
    std::vector<std::string> args = {"-np", "2"};
    args.insert(args.end(), bad.begin(), bad.end());
    args.push_back("x");
    const Parsed refused = Parse(args);
    ASSERT_FALSE(refused.ok()) << bad[0] << " " << bad[1];
    EXPECT_EQ(refused.exit_code(), 2);
    EXPECT_THAT(refused.err, HasSubstr(bad[0])) << refused.err;
  }

  // A configured daemon keeps its own configuration.
  LauncherOptions options = Options({"-np", "2", "--cycle-time-ms", "2", "x"});
  const absl::Status status = ApplyEnvironment({{"COLLECTIVE_SOCKET", "/run/a.sock"}}, options);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("set the private daemon's HOROVOD_CYCLE_TIME"));
}

// Horovod's --host-discovery-script turns elastic training on, with
// --slots-per-host (or --slots) and --elastic-timeout.
TEST(LauncherOptionsTest, AHostDiscoveryScriptMakesTheJobElastic) {
  Parsed parsed = Parse({"-np", "2", "--host-discovery-script", "./hosts.sh", "--slots", "4",
                         "--elastic-timeout", "30", "python", "train.py"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  EXPECT_TRUE(parsed.options().elastic);
  EXPECT_EQ(parsed.options().host_discovery_script, "./hosts.sh");
  EXPECT_EQ(parsed.options().slots_per_host, 4);
  EXPECT_EQ(parsed.options().elastic_timeout_seconds, 30);
  EXPECT_EQ(parsed.options().min_ranks, 2);
  EXPECT_EQ(parsed.options().max_ranks, 1024) << "as many as the script lists (Horovod: no bound)";

  parsed = Parse({"-np", "2", "--host-discovery-script", "h.sh", "--slots-per-host", "2",
                  "--max-np", "3", "x"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  EXPECT_EQ(parsed.options().slots_per_host, 2);
  EXPECT_EQ(parsed.options().max_ranks, 3);
  EXPECT_EQ(parsed.options().elastic_timeout_seconds, 0) << "decided with the environment";

  // The timeout: the flag, else HOROVOD_ELASTIC_TIMEOUT, else 600 s.
  LauncherOptions options = parsed.options();
  ASSERT_TRUE(ApplyEnvironment({{"HOROVOD_ELASTIC_TIMEOUT", "45"}}, options).ok());
  EXPECT_EQ(options.elastic_timeout_seconds, 45);
  options = parsed.options();
  ASSERT_TRUE(ApplyEnvironment({}, options).ok());
  EXPECT_EQ(options.elastic_timeout_seconds, 600);
  options = parsed.options();
  const absl::Status bad = ApplyEnvironment({{"HOROVOD_ELASTIC_TIMEOUT", "soon"}}, options);
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;

  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"-np", "2", "--slots", "2", "x"},
           {"-np", "2", "--elastic", "--elastic-timeout", "5", "x"},
           {"-np", "2", "--host-discovery-script", "h.sh", "--slots", "0", "x"}}) {
    const Parsed refused = Parse(args);
    ASSERT_FALSE(refused.ok()) << args[2];
    EXPECT_EQ(refused.exit_code(), 2) << args[2];
  }
}

// With a discovery script a failed worker's host is blacklisted, as in
// horovodrun: --blacklist-cooldown-range MIN MAX (Horovod's bounds) lets it
// come back, and --restart-failed, which would restart it there, is refused.
TEST(LauncherOptionsTest, ABlacklistCooldownRangeGoesWithADiscoveryScript) {
  Parsed parsed = Parse({"-np", "2", "--host-discovery-script", "h.sh",
                         "--blacklist-cooldown-range", "5", "300", "python", "train.py"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  ASSERT_TRUE(parsed.options().blacklist_cooldown.has_value());
  EXPECT_EQ(parsed.options().blacklist_cooldown->min_seconds, 5);
  EXPECT_EQ(parsed.options().blacklist_cooldown->max_seconds, 300);
  EXPECT_THAT(parsed.options().command, ElementsAre("python", "train.py"));
  parsed = Parse({"-np", "2", "--host-discovery-script", "h.sh", "x"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  EXPECT_FALSE(parsed.options().blacklist_cooldown.has_value()) << "out for good";

  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const Case cases[] = {
      {{"-np", "2", "--elastic", "--blacklist-cooldown-range", "1", "2", "x"},
       "needs --host-discovery-script, or --elastic with -H or --hostfile"},
      {{"-np", "2", "--host-discovery-script", "h.sh", "--blacklist-cooldown-range", "0", "9", "x"},
       "Provided cooldown lower limit: 0 cannot be lower than default cooldown lower limit: 1"},
      {{"-np", "2", "--host-discovery-script", "h.sh", "--blacklist-cooldown-range", "1", "3601",
        "x"},
       "Provided cooldown upper limit: 3601 cannot be higher"},
      {{"-np", "2", "--host-discovery-script", "h.sh", "--restart-failed", "1", "x"},
       "--restart-failed does not go with --host-discovery-script"},
      {{"-np", "2", "--elastic", "-H", "localhost:2", "--restart-failed", "1", "x"},
       "--restart-failed does not go with --host-discovery-script, -H or --hostfile"},
  };
  for (const Case& c : cases) {
    const Parsed refused = Parse(c.args);
    ASSERT_FALSE(refused.ok()) << c.says;
    EXPECT_EQ(refused.exit_code(), 2);
    EXPECT_THAT(refused.err, HasSubstr(c.says));
  }
}

// horovodrun's --config-file: its sections as the variables horovodrun
// exports, and the flags over them.
TEST(LauncherOptionsTest, HorovodrunsConfigFileSetsItsVariables) {
  const char* yaml = R"(
controller: mpi
params:
  fusion_threshold_mb: 32
  cycle_time_ms: 2.5
  cache_capacity: 0
  hierarchical_allreduce: true
autotune:
  enabled: true
  log_file: tune.csv
  warmup_samples: 3
timeline:
  filename: t.json
  mark_cycles: false
stall_check:
  enabled: false
  warning_time_seconds: 30
logging:
  level: DEBUG
  with_timestamp: false
library_options:
  mpi_threads_disable: true
  num_nccl_streams: 2
  thread_affinity: 1
  gloo_timeout_seconds: 30
)";
  auto variables = HorovodrunConfigVariables(yaml);
  ASSERT_TRUE(variables.ok()) << variables.status();
  EXPECT_EQ(*variables, (std::map<std::string, std::string>{
                            {"HOROVOD_AUTOTUNE", "1"},
                            {"HOROVOD_AUTOTUNE_LOG", "tune.csv"},
                            {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "3"},
                            {"HOROVOD_CACHE_CAPACITY", "0"},
                            {"HOROVOD_CYCLE_TIME", "2.5"},
                            {"HOROVOD_FUSION_THRESHOLD", "32"},
                            {"HOROVOD_GLOO_TIMEOUT_SECONDS", "30"},
                            {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"},
                            {"HOROVOD_LOG_HIDE_TIME", "1"},
                            {"HOROVOD_LOG_LEVEL", "DEBUG"},
                            {"HOROVOD_MPI_THREADS_DISABLE", "1"},
                            {"HOROVOD_NUM_NCCL_STREAMS", "2"},
                            {"HOROVOD_STALL_CHECK_DISABLE", "1"},
                            {"HOROVOD_STALL_CHECK_TIME_SECONDS", "30"},
                            {"HOROVOD_TIMELINE", "t.json"},
                            {"HOROVOD_THREAD_AFFINITY", "1"},
                            {"HOROVOD_TIMELINE_MARK_CYCLES", "0"},
                        }));
  // As horovodrun: autotune's settings only when it is on, marks only with a timeline.
  variables = HorovodrunConfigVariables(
      "autotune: {enabled: false, warmup_samples: 3}\ntimeline: {mark_cycles: true}\n");
  ASSERT_TRUE(variables.ok()) << variables.status();
  EXPECT_TRUE(variables->empty());
  EXPECT_TRUE(HorovodrunConfigVariables("")->empty());

  for (const char* bad :
       {"controller: jsrun", "params: {torus_allreduce: often}", "params: {cycle_time_ms: fast}",
        "params: {cache_capacity: -1}", "params: {fusion_threshold_mb: 1.5}",
        "autotune: {enabled: maybe}", "params: {cycle_time_ms: [1, 2]}", "params: [", "- a list"}) {
    const auto refused = HorovodrunConfigVariables(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("horovodrun config file")) << bad;
  }

  // The file through the command line; a flag overrides it.
  const std::string path = absl::StrCat(::testing::TempDir(), "/horovodrun-", ::getpid(), ".yaml");
  std::ofstream(path) << yaml;
  const Parsed parsed =
      Parse({"-np", "2", "--config-file", path, "--cycle-time-ms", "7", "python", "train.py"});
  std::remove(path.c_str());
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  EXPECT_EQ(parsed.options().horovod_variables.at("HOROVOD_CYCLE_TIME"), "7");
  EXPECT_EQ(parsed.options().horovod_variables.at("HOROVOD_FUSION_THRESHOLD"), "33554432");
  EXPECT_EQ(parsed.options().horovod_variables.at("HOROVOD_STALL_CHECK_DISABLE"), "1");

  // The file's autotune settings count once a flag turns autotune on, as
  // in horovodrun (the flag overrides `enabled`, not the settings).
  std::ofstream(path) << "autotune: {enabled: false, log_file: tune.csv}\n";
  const Parsed turned_on = Parse({"-np", "1", "--config-file", path, "--autotune", "x"});
  std::remove(path.c_str());
  ASSERT_TRUE(turned_on.ok()) << turned_on.err;
  EXPECT_EQ(turned_on.options().horovod_variables,
            (std::map<std::string, std::string>{{"HOROVOD_AUTOTUNE", "1"},
                                                {"HOROVOD_AUTOTUNE_LOG", "tune.csv"}}));

  const Parsed missing = Parse({"-np", "2", "--config-file", "/nonexistent/h.yaml", "x"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.exit_code(), 2);
  EXPECT_THAT(missing.err, HasSubstr("cannot read the horovodrun config file /nonexistent/h.yaml"));
}

size_t Occurrences(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) {
    ++count;
  }
  return count;
}

// Each horovodrun setting collectived has no use for is taken, and the
// launcher says once that it does not apply and why; flags that take effect
// are not noted.
TEST(LauncherOptionsTest, HorovodrunsInapplicableSettingsAreNotedOnce) {
  const Parsed parsed = Parse({"-np",
                               "1",
                               "--hierarchical-allreduce",
                               "--no-hierarchical-allreduce",
                               "--hierarchical-allgather",
                               "--torus-allreduce",
                               "--num-nccl-streams",
                               "2",
                               "--thread-affinity",
                               "1",
                               "--gloo-timeout-seconds",
                               "3",
                               "--mpi-threads-disable",
                               "--log-without-timestamp",
                               "--log-with-timestamp",
                               "--autotune-gaussian-process-noise",
                               "0.5",
                               "--disable-cache",
                               "--gloo",
                               "--mpi",
                               "--fusion-threshold-mb",
                               "8",
                               "x"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  for (const char* setting :
       {"--hierarchical-allreduce/", "--hierarchical-allgather/", "--torus-allreduce/",
        "--num-nccl-streams ", "--thread-affinity ", "--gloo-timeout-seconds ",
        "--mpi-threads-disable/", "--log-with-timestamp/", "--autotune-gaussian-process-noise ",
        "--disable-cache ", "--gloo ", "--mpi "}) {
    EXPECT_EQ(Occurrences(parsed.err, absl::StrCat("collectiverun: ", setting)), 1u)
        << setting << " in:\n"
        << parsed.err;
  }
  EXPECT_EQ(Occurrences(parsed.err, " does not apply: "), 12u) << parsed.err;
  EXPECT_THAT(parsed.err, HasSubstr("always hierarchical here"));
  EXPECT_THAT(parsed.err, HasSubstr("pin collectived itself"));
  EXPECT_EQ(parsed.options().horovod_variables.at("HOROVOD_FUSION_THRESHOLD"), "8388608");

  const Parsed effective = Parse({"-np", "1", "--fusion-threshold-mb", "8", "--autotune",
                                  "--timeline-filename", "t.json", "--no-stall-check", "x"});
  ASSERT_TRUE(effective.ok()) << effective.err;
  EXPECT_EQ(effective.err, "");

  // The config file's keys as well.
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/inapplicable-", ::getpid(), ".yaml");
  std::ofstream(path) << "params: {torus_allreduce: true, cycle_time_ms: 2}\n"
                         "library_options: {num_nccl_streams: 2}\n";
  const Parsed configured = Parse({"-np", "1", "--config-file", path, "x"});
  std::remove(path.c_str());
  ASSERT_TRUE(configured.ok()) << configured.err;
  EXPECT_EQ(Occurrences(configured.err, " does not apply: "), 2u) << configured.err;
  EXPECT_THAT(configured.err, HasSubstr("(params.torus_allreduce) does not apply"));
  EXPECT_THAT(configured.err, HasSubstr("(library_options.num_nccl_streams) does not apply"));
}

// As horovodrun's: --network-interface and --network-interfaces, each as often
// as wanted, with one interface or a list: the union, each interface once.
TEST(LauncherOptionsTest, NetworkInterfacesMayBeRepeated) {
  const Parsed parsed = Parse({"--network-interface", "eth0", "--network-interface", "eth1,eth0",
                               "--network-interfaces", "ib0", "-np", "2", "-H", "node-b:2", "x"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  EXPECT_EQ(parsed.options().network_interfaces, "eth0,eth1,ib0");
  // One value a flag: the command may follow.
  const LauncherOptions before_command =
      Options({"-np", "1", "--network-interface", "eth0", "python", "train.py"});
  EXPECT_EQ(before_command.network_interfaces, "eth0");
  EXPECT_EQ(before_command.command, (std::vector<std::string>{"python", "train.py"}));
}

// horovodrun's -H and -hostfile: this machine only, with enough slots.
TEST(LauncherOptionsTest, HorovodrunsHostListsNameThisMachine) {
  EXPECT_TRUE(Parse({"-np", "4", "-H", "localhost:4", "python", "train.py"}).ok());
  // Each host a stand-in node; a name listed twice is one host.
  const Parsed two = Parse({"-np", "3", "--hosts", "localhost:1,127.0.0.1,localhost:1", "x"});
  ASSERT_TRUE(two.ok()) << two.err;
  ASSERT_EQ(two.options().hosts.size(), 2u);
  EXPECT_EQ(two.options().hosts[0].name, "localhost");
  EXPECT_EQ(two.options().hosts[0].slots, 2);
  EXPECT_EQ(two.options().hosts[1].name, "127.0.0.1");
  EXPECT_EQ(two.options().hosts[1].slots, 1);

  const std::string path = absl::StrCat(::testing::TempDir(), "/hostfile-", ::getpid());
  std::ofstream(path) << "localhost slots=2\n";
  EXPECT_TRUE(Parse({"-np", "2", "-hostfile", path, "x"}).ok());
  const Parsed too_many = Parse({"-np", "3", "--hostfile", path, "x"});
  std::remove(path.c_str());
  ASSERT_FALSE(too_many.ok());
  EXPECT_THAT(too_many.err, HasSubstr("-np 3 is more than the 2 slots the hosts list"));

  // Another machine: mpirun starts the daemons and ranks there
  // (machines_job.h).
  EXPECT_FALSE(OnOtherMachines(two.options()));
  const Parsed remote = Parse({"-np", "3", "-H", "localhost:1,node-b:1,node-b:1", "x"});
  ASSERT_TRUE(remote.ok()) << remote.err;
  EXPECT_TRUE(OnOtherMachines(remote.options()));
  ASSERT_EQ(remote.options().hosts.size(), 2u);
  EXPECT_EQ(remote.options().hosts[1].name, "node-b");
  EXPECT_EQ(remote.options().hosts[1].slots, 2);
  // An elastic job too (its workers started over ssh: remote_hosts.h).
  const Parsed elastic_remote = Parse({"--min-np", "1", "-np", "2", "-H", "node-b:2", "x"});
  ASSERT_TRUE(elastic_remote.ok()) << elastic_remote.err;
  EXPECT_TRUE(elastic_remote.options().elastic);
  EXPECT_TRUE(OnOtherMachines(elastic_remote.options()));

  const Parsed both =
      Parse({"-np", "2", "-H", "localhost:2", "--host-discovery-script", "h.sh", "x"});
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(both.err, HasSubstr("exclude each other"));
  EXPECT_FALSE(Parse({"-np", "2", "--hostfile", "/nonexistent/hosts", "x"}).ok());
}

}  // namespace
TEST(LauncherOptionsTest, HorovodrunsFlagsForMachines) {
  const Parsed parsed = Parse(
      {"-p", "2222", "-i", "/keys/id", "--network-interfaces", "eth0,eth1", "--start-timeout", "45",
       "--mpi-args=--mca plm_rsh_args \"-o Foo='a b'\" -x\tA", "-np", "2", "-H", "node-b:2", "x"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  const LauncherOptions& options = parsed.options();
  EXPECT_EQ(options.ssh_port, 2222);
  EXPECT_EQ(options.ssh_identity_file, "/keys/id");
  EXPECT_EQ(options.network_interfaces, "eth0,eth1");
  EXPECT_EQ(options.start_timeout_seconds, 45);
  // Split as the shell splits: quotes kept together, then removed.
  EXPECT_EQ(options.mpi_args,
            (std::vector<std::string>{"--mca", "plm_rsh_args", "-o Foo='a b'", "-x", "A"}));
  EXPECT_EQ(options.command, std::vector<std::string>{"x"});

  // Nothing is run while splitting.
  const Parsed command = Parse({"--mpi-args=$(touch /tmp/x)", "-np", "1", "x"});
  ASSERT_FALSE(command.ok());
  EXPECT_EQ(command.exit_code(), 2);
  EXPECT_THAT(command.err, HasSubstr("command substitution is not run"));
  EXPECT_FALSE(Parse({"-p", "0", "-np", "1", "x"}).ok());

  // --start-timeout, else HOROVOD_START_TIMEOUT.
  LauncherOptions from_environment = Options({"-np", "1", "x"});
  ASSERT_TRUE(ApplyEnvironment({{"HOROVOD_START_TIMEOUT", "12"}}, from_environment).ok());
  EXPECT_EQ(from_environment.start_timeout_seconds, 12);
  LauncherOptions flag_wins = Options({"--start-timeout", "5", "-np", "1", "x"});
  ASSERT_TRUE(ApplyEnvironment({{"HOROVOD_START_TIMEOUT", "12"}}, flag_wins).ok());
  EXPECT_EQ(flag_wins.start_timeout_seconds, 5);
  LauncherOptions bad = Options({"-np", "1", "x"});
  const absl::Status refused = ApplyEnvironment({{"HOROVOD_START_TIMEOUT", "soon"}}, bad);
  EXPECT_THAT(refused.message(),
              HasSubstr("HOROVOD_START_TIMEOUT is 'soon', not a positive number of seconds"));
}

TEST(LauncherOptionsTest, VersionAsHorovodrunTakesIt) {
  for (const char* flag : {"-v", "--version"}) {
    const Parsed parsed = Parse({flag});
    ASSERT_FALSE(parsed.ok()) << flag;
    EXPECT_EQ(parsed.exit_code(), 0) << flag;
    EXPECT_EQ(parsed.out, std::string(COLLECTIVE_VERSION) + "\n") << flag;
  }
}

TEST(LauncherOptionsTest, CheckBuildNeedsNoJob) {
  for (const char* flag : {"-cb", "--check-build"}) {
    const Parsed parsed = Parse({flag});
    ASSERT_TRUE(parsed.ok()) << flag << ": " << parsed.err;
    EXPECT_TRUE(parsed.options().check_build) << flag;
  }
  const Parsed in_command = Parse({"-np", "1", "tool", "-cb"});
  ASSERT_TRUE(in_command.ok()) << in_command.err;
  EXPECT_FALSE(in_command.options().check_build);
  EXPECT_EQ(in_command.options().command, (std::vector<std::string>{"tool", "-cb"}));
  const Parsed no_ranks = Parse({"tool", "--check-build"});
  ASSERT_FALSE(no_ranks.ok());
  EXPECT_EQ(no_ranks.exit_code(), 2);
  EXPECT_THAT(no_ranks.err, HasSubstr("--np is required"));
}

// The rest of horovodrun's flags: the opposites of its switches, library
// options and log timestamps (set as horovodrun sets them; README says what
// changes nothing here), aliases, output timestamps and binding.
TEST(LauncherOptionsTest, HorovodrunsOtherFlagsAreTaken) {
  const Parsed parsed = Parse({"--num-proc",
                               "2",
                               "--no-hierarchical-allreduce",
                               "--no-hierarchical-allgather",
                               "--torus-allreduce",
                               "--mpi-threads-disable",
                               "--num-nccl-streams",
                               "2",
                               "--thread-affinity",
                               "1",
                               "--gloo-timeout-seconds",
                               "30",
                               "--log-without-timestamp",
                               "--stall-check",
                               "--autotune-gaussian-process-noise",
                               "0.8",
                               "--autotune-log-file",
                               "a.csv",
                               "--no-timeline-mark-cycles",
                               "-prefix-timestamp",
                               "--binding-args=--bind-to core",
                               "x"});
  ASSERT_TRUE(parsed.ok()) << parsed.err;
  EXPECT_EQ(parsed.options().ranks, 2);
  EXPECT_TRUE(parsed.options().prefix_timestamp);
  EXPECT_EQ(parsed.options().binding_args, (std::vector<std::string>{"--bind-to", "core"}));
  // Without --autotune, autotune's settings are not exported; without a
  // timeline, the cycles' marks are not (as horovodrun exports them).
  EXPECT_EQ(parsed.options().horovod_variables, (std::map<std::string, std::string>{
                                                    {"HOROVOD_GLOO_TIMEOUT_SECONDS", "30"},
                                                    {"HOROVOD_HIERARCHICAL_ALLGATHER", "0"},
                                                    {"HOROVOD_HIERARCHICAL_ALLREDUCE", "0"},
                                                    {"HOROVOD_LOG_HIDE_TIME", "1"},
                                                    {"HOROVOD_MPI_THREADS_DISABLE", "1"},
                                                    {"HOROVOD_NUM_NCCL_STREAMS", "2"},
                                                    {"HOROVOD_STALL_CHECK_DISABLE", "0"},
                                                    {"HOROVOD_THREAD_AFFINITY", "1"},
                                                    {"HOROVOD_TORUS_ALLREDUCE", "1"},
                                                }));
  const Parsed tuned = Parse(
      {"-np", "1", "--autotune", "--autotune-gaussian-process-noise", "0.8", "--no-autotune", "x"});
  ASSERT_TRUE(tuned.ok()) << tuned.err;
  EXPECT_TRUE(tuned.options().horovod_variables.empty()) << "--no-autotune, given last, wins";

  const Parsed elastic = Parse({"--min-num-proc", "1", "--max-num-proc", "3", "-np", "2", "x"});
  ASSERT_TRUE(elastic.ok()) << elastic.err;
  EXPECT_EQ(elastic.options().min_ranks, 1);
  EXPECT_EQ(elastic.options().max_ranks, 3);

  const Parsed jsrun = Parse({"--jsrun", "-np", "1", "x"});
  ASSERT_FALSE(jsrun.ok());
  EXPECT_EQ(jsrun.exit_code(), 2);
  EXPECT_THAT(jsrun.err, HasSubstr("--jsrun: collectiverun starts the ranks itself"));
}

}  // namespace collective::launcher
