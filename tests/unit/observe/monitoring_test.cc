// deploy/monitoring: the Grafana dashboard and the Prometheus alert rules
// refer only to series the daemon exports (the families of the metrics text
// it renders, a histogram's _bucket, _sum and _count included), and both
// files are well formed.
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/observe/metrics.h"

namespace collective::daemon::observe {
namespace {

const std::string kMonitoring = COLLECTIVE_SOURCE_DIR "/deploy/monitoring/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Family name -> type, from the "# TYPE" lines of what the daemon serves.
std::map<std::string, std::string> ExportedFamilies() {
  const std::string text = Metrics("").Render({.job_state = "idle"});
  std::map<std::string, std::string> families;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "# TYPE ")) continue;
    const std::vector<std::string> words = absl::StrSplit(line, ' ');
    if (words.size() == 2) families[words[0]] = words[1];
  }
  return families;
}

bool Exported(const std::map<std::string, std::string>& families, const std::string& series) {
  if (families.contains(series)) return true;
  for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
    absl::string_view base = series;
    if (absl::ConsumeSuffix(&base, suffix)) {
      const auto it = families.find(std::string(base));
      if (it != families.end() && it->second == "histogram") return true;
    }
  }
  return false;
}

// The daemon's series a PromQL expression names: identifiers in its
// namespaces (collectived_*, process_*), outside quoted label values.
std::set<std::string> SeriesIn(const std::string& expr) {
  const std::string unquoted = std::regex_replace(expr, std::regex(R"("([^"\\]|\\.)*")"), "\"\"");
  std::set<std::string> series;
  const std::regex name(R"(\b(collectived|process)_[a-zA-Z0-9_]+)");
  for (auto it = std::sregex_iterator(unquoted.begin(), unquoted.end(), name);
       it != std::sregex_iterator(); ++it) {
    series.insert(it->str());
  }
  return series;
}

// Every "expr" string anywhere in a JSON value.
void CollectExprs(const google::protobuf::Value& value, std::vector<std::string>& exprs) {
  if (value.has_struct_value()) {
    for (const auto& [key, field] : value.struct_value().fields()) {
      if (key == "expr" && field.has_string_value()) exprs.push_back(field.string_value());
      CollectExprs(field, exprs);
    }
  } else if (value.has_list_value()) {
    for (const google::protobuf::Value& item : value.list_value().values()) {
      CollectExprs(item, exprs);
    }
  }
}

TEST(MonitoringTest, TheDaemonExportsTheSeriesItsDashboardAndAlertsUse) {
  const auto families = ExportedFamilies();
  ASSERT_TRUE(families.contains("collectived_job_state"));
  ASSERT_TRUE(families.contains("process_open_fds"));

  google::protobuf::Value dashboard;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      ReadFile(kMonitoring + "collectived-dashboard.json"), &dashboard);
  ASSERT_TRUE(parsed.ok()) << parsed.ToString();
  std::vector<std::string> exprs;
  CollectExprs(dashboard, exprs);
  EXPECT_GE(exprs.size(), 10u);

  const YAML::Node rules = YAML::LoadFile(kMonitoring + "collectived-alerts.yaml");
  ASSERT_TRUE(rules["groups"].IsSequence());
  size_t alerts = 0;
  for (const YAML::Node& group : rules["groups"]) {
    for (const YAML::Node& rule : group["rules"]) {
      SCOPED_TRACE(rule["alert"].as<std::string>());
      ++alerts;
      EXPECT_TRUE(rule["labels"]["severity"].IsDefined());
      EXPECT_TRUE(rule["annotations"]["summary"].IsDefined());
      EXPECT_TRUE(rule["annotations"]["description"].IsDefined());
      exprs.push_back(rule["expr"].as<std::string>());
    }
  }
  EXPECT_GE(alerts, 5u);

  std::set<std::string> used;
  for (const std::string& expr : exprs) {
    for (const std::string& series : SeriesIn(expr)) {
      EXPECT_TRUE(Exported(families, series)) << series << " in " << expr;
      used.insert(series);
    }
  }
  // The ones an operator needs first are there.
  for (const char* series : {"collectived_stalled_tensors", "collectived_jobs_ended_total",
                             "collectived_errors_total", "process_start_time_seconds"}) {
    EXPECT_TRUE(used.contains(series)) << series;
  }
}

TEST(MonitoringTest, SeriesAreReadFromExpressionsButNotFromLabelValues) {
  EXPECT_EQ(SeriesIn(R"(sum by (le) (rate(collectived_x_bucket{job="collectived_y"}[5m])))"),
            std::set<std::string>{"collectived_x_bucket"});
  EXPECT_EQ(SeriesIn("process_open_fds / process_max_fds > 0.8"),
            (std::set<std::string>{"process_max_fds", "process_open_fds"}));
  const std::map<std::string, std::string> families = {{"h", "histogram"}, {"c", "counter"}};
  EXPECT_TRUE(Exported(families, "h_bucket"));
  EXPECT_TRUE(Exported(families, "c"));
  EXPECT_FALSE(Exported(families, "c_bucket"));
  EXPECT_FALSE(Exported(families, "d"));
}

}  // namespace
}  // namespace collective::daemon::observe
