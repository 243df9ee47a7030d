// Allgather, broadcast, alltoall and reducescatter with a real daemon and 1,
// 2, 3, 4 and 8 real client processes: every dtype they support at 0, 1, 7,
// 4096 + 3 elements and beyond the fusion threshold, inputs in private
// memory and in the arena, results copied out, viewed and (broadcast) in
// place, with uneven first dimensions, ranks that send or receive nothing,
// and every broadcast root; then grouped collectives, which the daemon fuses,
// and many mixed requests outstanding at once. The workers check every
// result bitwise against what every rank's deterministic data must give.
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/integration/collectives_job.h"

namespace collective::testing {
namespace {

constexpr char kFusionThreshold[] = "65536";

struct Param {
  std::string scenario;
  int clients;
};

void PrintTo(const Param& param, std::ostream* os) {
  *os << param.scenario << " with " << param.clients << " clients";
}

class CollectivesTest : public ::testing::TestWithParam<Param> {};

// "ok N ..." -> N.
uint64_t CasesReported(const std::string& out) {
  const std::vector<std::string> words = absl::StrSplit(out, ' ');
  uint64_t cases = 0;
  if (words.size() < 2 || words[0] != "ok" || !absl::SimpleAtoi(words[1], &cases)) return 0;
  return cases;
}

TEST_P(CollectivesTest, EveryRankGetsTheReferenceResult) {
  const Param param = GetParam();
  Job job;
  ASSERT_NO_FATAL_FAILURE(
      RunJob(job,
             {"--fusion-threshold-bytes", kFusionThreshold, "--default-arena-bytes", "16MiB",
              "--result-arena-bytes", "64MiB"},
             param.clients, {param.scenario, "--big-bytes", kFusionThreshold}));
  EXPECT_EQ(job.failures, "");
  const uint64_t cases = CasesReported(job.workers[0].Stdout());
  for (int rank = 0; rank < param.clients; ++rank) {
    EXPECT_EQ(CasesReported(job.workers[rank].Stdout()), cases) << "rank " << rank;
  }
  EXPECT_GT(cases, 0u);

  auto status = job.daemon->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().errors(), 0u);
  // One collective per case, each request of each rank completed.
  EXPECT_EQ(status->totals().collectives(), cases);
  EXPECT_EQ(status->totals().requests(), cases * static_cast<uint64_t>(param.clients));
  if (param.scenario == "grouped") {
    // The tensors of a group are ready together, and fused.
    EXPECT_LT(status->totals().fused_batches(), status->totals().collectives());
  }
  ExpectCleanStop(*job.daemon);
}

std::vector<Param> Params() {
  std::vector<Param> params;
  for (const char* scenario : {"allgather-matrix", "broadcast-matrix", "alltoall-matrix",
                               "reducescatter-matrix", "grouped", "mixed"}) {
    for (int clients : {1, 2, 3, 4, 8}) params.push_back({scenario, clients});
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, CollectivesTest, ::testing::ValuesIn(Params()),
                         [](const auto& test_info) {
                           return absl::StrCat(
                               absl::StrReplaceAll(test_info.param.scenario, {{"-", "_"}}), "_",
                               test_info.param.clients, "Clients");
                         });

}  // namespace
}  // namespace collective::testing
