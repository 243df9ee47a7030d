// daemon/stall_inspector: when a tensor counts as stalled, how often the
// report is logged, which ranks it names (global ranks of the set, never
// joined ones), the shutdown list, and the texts of the report and of the
// shutdown error.
#include "daemon/negotiation/stall_inspector.h"

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon::negotiation {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

using Ranks = std::vector<int32_t>;

class StallInspectorTest : public ::testing::Test {
 protected:
  static constexpr int32_t kWorld = 4;

  void SetUp() override {
    for (int32_t rank = 0; rank < kWorld; ++rank) {
      auto client = std::make_unique<job::ClientRecord>();
      client->id = 100 + rank;
      client->topology.set_rank(rank);
      client->topology.set_size(kWorld);
      clients_.push_back(std::move(client));
    }
    ASSERT_TRUE(sets_.Add(Ranks{1, 3}).ok());  // process set 1
    // Capture what the inspector logs on the coordination logger.
    sink_ = std::make_shared<spdlog::sinks::ostream_sink_st>(log_);
    sink_->set_pattern("%v");
    log::Coord().sinks().push_back(sink_);
  }

  void TearDown() override {
    auto& sinks = log::Coord().sinks();
    std::erase(sinks, sink_);
  }

  // Rank `global_rank` submits `name` to `set` at `at`.
  void Submit(int32_t global_rank, const std::string& name, Clock::time_point at, int32_t set = 0) {
    const job::ProcessSet* process_set = sets_.Find(set);
    ASSERT_NE(process_set, nullptr);
    negotiation::Submission submission;
    submission.client = clients_[global_rank].get();
    submission.rank = submission.client->topology.rank();
    submission.set_rank = process_set->RankOf(global_rank);
    submission.request.set_request_id(1);
    submission.request.set_name(name);
    submission.request.set_collective(v1::COLLECTIVE_ALLREDUCE);
    submission.request.set_process_set_id(set);
    submission.at = at;
    ASSERT_TRUE(coordinator_.Add(std::move(submission), process_set->size()).ok());
  }

  // The inspector's view of the coordinator (one node: every rank local).
  std::vector<negotiation::StalledTensor> Inspect(negotiation::StallInspector& inspector,
                                                  Clock::time_point now) {
    return inspector.Inspect(now, coordinator_.Waiting(sets_, [](int32_t) { return true; }));
  }

  // What was logged since the last call.
  std::string TakeLog() {
    std::string text = log_.str();
    log_.str("");
    return text;
  }

  static std::vector<std::string> Names(const std::vector<negotiation::StalledTensor>& stalled) {
    std::vector<std::string> names;
    for (const negotiation::StalledTensor& tensor : stalled) names.push_back(tensor.name);
    return names;
  }

  const Clock::time_point t0_ = Clock::now();
  std::vector<std::unique_ptr<job::ClientRecord>> clients_;
  job::ProcessSetTable sets_{kWorld};
  negotiation::Coordinator coordinator_;
  std::ostringstream log_;
  std::shared_ptr<spdlog::sinks::ostream_sink_st> sink_;
};

constexpr auto kSecond = std::chrono::seconds(1);
constexpr auto kMilli = std::chrono::milliseconds(1);

TEST_F(StallInspectorTest, DisabledByAZeroCheckTime) {
  negotiation::StallInspector inspector(0, 5);
  EXPECT_FALSE(inspector.enabled());
  Submit(0, "w", t0_);
  EXPECT_THAT(Inspect(inspector, t0_ + 3600 * kSecond), IsEmpty());
  EXPECT_EQ(TakeLog(), "");
}

TEST_F(StallInspectorTest, NothingBeforeTheCheckTime) {
  negotiation::StallInspector inspector(10, 0);
  EXPECT_TRUE(inspector.enabled());
  EXPECT_EQ(inspector.check_after(), 10 * kSecond);
  Submit(0, "w", t0_);
  EXPECT_THAT(Inspect(inspector, t0_ + 10 * kSecond - kMilli), IsEmpty());
  EXPECT_EQ(TakeLog(), "") << "younger than stall_check_seconds";
  EXPECT_THAT(Inspect(inspector, t0_ + 10 * kSecond), IsEmpty())
      << "no shutdown limit: nothing is handed back";
  EXPECT_THAT(TakeLog(), HasSubstr("Missing ranks:\n1: [w]\n2: [w]\n3: [w]"));
}

TEST_F(StallInspectorTest, AgeCountsFromTheFirstSubmission) {
  negotiation::StallInspector inspector(10, 0);
  Submit(2, "w", t0_);
  Submit(0, "w", t0_ + 8 * kSecond);
  Inspect(inspector, t0_ + 10 * kSecond);
  EXPECT_THAT(TakeLog(), HasSubstr("Missing ranks:\n1: [w]\n3: [w]"));
}

TEST_F(StallInspectorTest, ReportsAtMostOncePerPeriod) {
  negotiation::StallInspector inspector(10, 0);
  Submit(0, "w", t0_);
  Inspect(inspector, t0_ + 10 * kSecond);
  const std::string first = TakeLog();
  EXPECT_THAT(first, HasSubstr("have waited more than 10 s for the rest"));
  EXPECT_THAT(first, Not(HasSubstr("They fail after"))) << "no shutdown limit";
  Inspect(inspector, t0_ + 11 * kSecond);
  Inspect(inspector, t0_ + 20 * kSecond - kMilli);
  EXPECT_EQ(TakeLog(), "") << "within the period of the last report";
  Inspect(inspector, t0_ + 20 * kSecond);
  EXPECT_THAT(TakeLog(), HasSubstr("Missing ranks:"));
}

TEST_F(StallInspectorTest, NoReportWhenNothingIsStalled) {
  negotiation::StallInspector inspector(10, 0);
  Inspect(inspector, t0_ + 10 * kSecond);
  EXPECT_EQ(TakeLog(), "");
  // A quiet check does not start a period: the first stall is reported at once.
  Submit(0, "w", t0_ + 5 * kSecond);
  Inspect(inspector, t0_ + 15 * kSecond);
  EXPECT_THAT(TakeLog(), HasSubstr("Missing ranks:"));
}

TEST_F(StallInspectorTest, MissingRanksAreGlobalRanksOfTheSet) {
  negotiation::StallInspector inspector(1, 2);
  Submit(3, "w", t0_, /*set=*/1);  // set rank 1; set rank 0 (global 1) is missing
  const std::vector<negotiation::StalledTensor> expired = Inspect(inspector, t0_ + 2 * kSecond);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].process_set_id, 1);
  EXPECT_EQ(expired[0].name, "w");
  EXPECT_THAT(expired[0].missing_ranks, ElementsAre(1));
  EXPECT_EQ(expired[0].age, 2 * kSecond);
  EXPECT_THAT(TakeLog(), HasSubstr("Missing ranks:\n1: [w]"));
}

TEST_F(StallInspectorTest, JoinedRanksAreNotMissing) {
  negotiation::StallInspector inspector(1, 1);
  coordinator_.Join(0, 2, kWorld);
  Submit(0, "w", t0_);
  const std::vector<negotiation::StalledTensor> expired = Inspect(inspector, t0_ + kSecond);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_THAT(expired[0].missing_ranks, ElementsAre(1, 3));
  EXPECT_THAT(TakeLog(), HasSubstr("Missing ranks:\n1: [w]\n3: [w]"));
}

TEST_F(StallInspectorTest, HandsBackTensorsPastTheShutdownLimit) {
  negotiation::StallInspector inspector(10, 30);
  Submit(0, "old", t0_);
  Submit(1, "young", t0_ + 15 * kSecond);
  Submit(3, "set", t0_ + 5 * kSecond, /*set=*/1);
  EXPECT_THAT(Inspect(inspector, t0_ + 30 * kSecond - kMilli), IsEmpty());
  EXPECT_THAT(TakeLog(), HasSubstr("They fail after 30 s (stall_shutdown_seconds)."));

  std::vector<negotiation::StalledTensor> expired = Inspect(inspector, t0_ + 30 * kSecond);
  EXPECT_THAT(Names(expired), ElementsAre("old"));
  expired = Inspect(inspector, t0_ + 40 * kSecond);
  std::sort(expired.begin(), expired.end(),
            [](const negotiation::StalledTensor& a, const negotiation::StalledTensor& b) {
              return a.name < b.name;
            });
  EXPECT_THAT(Names(expired), ElementsAre("old", "set"))
      << "the inspector hands back; taking the tensors away is the engine's";
  EXPECT_EQ(expired[0].age, 40 * kSecond);
  EXPECT_THAT(expired[0].missing_ranks, ElementsAre(1, 2, 3));
  EXPECT_EQ(expired[1].age, 35 * kSecond);
  EXPECT_THAT(expired[1].missing_ranks, ElementsAre(1));

  // The report lists the oldest first under each rank.
  const std::string report = TakeLog();
  EXPECT_THAT(report, HasSubstr("Missing ranks:\n0: [young]\n1: [old, set]\n2: [old, young]\n"
                                "3: [old, young]"));
}

TEST_F(StallInspectorTest, ShutdownMessage) {
  const negotiation::StallInspector inspector(10, 30);
  const negotiation::StalledTensor tensor{.process_set_id = 2,
                                          .name = "layer1.weight",
                                          .missing_ranks = {1, 3},
                                          .age = std::chrono::milliseconds(31500)};
  EXPECT_EQ(inspector.ShutdownMessage(tensor),
            "tensor 'layer1.weight' of process set 2 waited 31.5 s for ranks [1, 3] to submit it "
            "and was failed (stall_shutdown_seconds is 30)");
  const negotiation::StallInspector fractional(0.5, 2.25);
  EXPECT_EQ(
      fractional.ShutdownMessage(
          {.process_set_id = 0, .name = "w", .missing_ranks = {0}, .age = std::chrono::seconds(3)}),
      "tensor 'w' of process set 0 waited 3 s for ranks [0] to submit it and was failed "
      "(stall_shutdown_seconds is 2.25)");
}

negotiation::StalledTensor Stalled(const std::string& name, Ranks missing) {
  return {.process_set_id = 0, .name = name, .missing_ranks = std::move(missing), .age = {}};
}

TEST_F(StallInspectorTest, ReportsMessagesThatWaitForTheirPeerButNeverFailsThem) {
  negotiation::StallInspector inspector(10, 20);
  const std::vector<negotiation::WaitingMessage> waiting = {{.process_set_id = 0,
                                                             .collective = v1::COLLECTIVE_RECV,
                                                             .rank = 1,
                                                             .peer = 0,
                                                             .tag = 7,
                                                             .dtype = v1::DATA_TYPE_FLOAT32,
                                                             .bytes = 16,
                                                             .since = t0_},
                                                            {.process_set_id = 1,
                                                             .collective = v1::COLLECTIVE_SEND,
                                                             .rank = 3,
                                                             .peer = 1,
                                                             .tag = 0,
                                                             .bytes = 4,
                                                             .since = t0_ + 5 * kSecond}};
  inspector.InspectMessages(t0_ + 10 * kSecond - kMilli, waiting);
  EXPECT_EQ(TakeLog(), "") << "nothing has waited 10 s yet";
  inspector.InspectMessages(t0_ + 12 * kSecond, waiting);
  const std::string report = TakeLog();
  EXPECT_THAT(report, HasSubstr("have waited more than 10 s for the other rank's half"));
  EXPECT_THAT(report, HasSubstr("is not failed by stall_shutdown_seconds"));
  EXPECT_THAT(report, HasSubstr("\n1: receive from rank 0 with tag 7, 16 bytes, waiting 12.0 s"));
  EXPECT_THAT(report, Not(HasSubstr("3: send"))) << "it has waited only 7 s";
  inspector.InspectMessages(t0_ + 21 * kSecond, waiting);
  EXPECT_EQ(TakeLog(), "") << "within the period of the last report";
  inspector.InspectMessages(t0_ + 30 * kSecond, waiting);
  EXPECT_THAT(TakeLog(), HasSubstr("\n3: send to rank 1 with tag 0 (process set 1), 4 bytes, "
                                   "waiting 25.0 s"));
}

TEST(FormatMissingRanksTest, ListsTensorsByRankInAscendingRankOrder) {
  EXPECT_EQ(negotiation::FormatMissingRanks({}), "Missing ranks:");
  EXPECT_EQ(
      negotiation::FormatMissingRanks({Stalled("a", {3, 1}), Stalled("b", {1}), Stalled("c", {0})}),
      "Missing ranks:\n0: [c]\n1: [a, b]\n3: [a]");
}

TEST(FormatMissingRanksTest, BoundedPerRank) {
  std::vector<negotiation::StalledTensor> stalled;
  for (int i = 0; i < 7; ++i) stalled.push_back(Stalled(absl::StrCat("t", i), {2}));
  stalled.push_back(Stalled("u", {4}));
  EXPECT_EQ(negotiation::FormatMissingRanks(stalled),
            "Missing ranks:\n2: [t0, t1, t2, t3, t4 ... and 2 more]\n4: [u]");
  stalled.resize(5);
  EXPECT_EQ(negotiation::FormatMissingRanks(stalled), "Missing ranks:\n2: [t0, t1, t2, t3, t4]")
      << "exactly the bound: nothing left out";
}

TEST(FormatMissingRanksTest, BoundedInTotal) {
  // 40 ranks missing 100 tensors each: 32 ranks of 5 names are shown.
  std::vector<negotiation::StalledTensor> stalled;
  Ranks all;
  for (int32_t rank = 0; rank < 40; ++rank) all.push_back(rank);
  for (int i = 0; i < 100; ++i) stalled.push_back(Stalled(absl::StrCat("tensor", i), all));
  const std::string report = negotiation::FormatMissingRanks(stalled);
  EXPECT_THAT(report, HasSubstr("\n31: [tensor0, tensor1, tensor2, tensor3, tensor4 ... and 95 "
                                "more]\n... and 8 more ranks"));
  EXPECT_THAT(report, Not(HasSubstr("\n32: ")));
  EXPECT_TRUE(report.ends_with("... and 8 more ranks")) << report;
  EXPECT_LT(report.size(), 3000u) << "bounded whatever the job's size";

  Ranks exactly;
  for (int32_t rank = 0; rank < 32; ++rank) exactly.push_back(rank);
  const std::string full = negotiation::FormatMissingRanks({Stalled("x", exactly)});
  EXPECT_TRUE(full.ends_with("\n31: [x]")) << full;
  EXPECT_THAT(full, Not(HasSubstr("more ranks")));
}

}  // namespace
}  // namespace collective::daemon::negotiation
