// Reduce, gather and scatter with a real daemon and 2, 3 and 4 real client
// processes (collectives_worker_rooted.cc): every reduce op over several
// dtypes against the reference reduction, every root, in place at the root,
// uneven gathers and scatters with ranks of no rows, each result checked
// bitwise by the workers; and requests that disagree (a reduce's root, a
// gather's dtype, a scatter's rows), which fail on every rank with the same
// text before the job carries on.
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/collectives_job.h"

namespace collective::testing {
namespace {

class RootedTest : public ::testing::TestWithParam<int> {};

TEST_P(RootedTest, EveryRankGetsTheReferenceResult) {
  const int clients = GetParam();
  Job job;
  ASSERT_NO_FATAL_FAILURE(RunJob(job,
                                 {"--fusion-threshold-bytes", "65536", "--default-arena-bytes",
                                  "32MiB", "--result-arena-bytes", "64MiB"},
                                 clients, {"rooted-matrix"}, absl::Seconds(240)));
  EXPECT_EQ(job.failures, "");
  uint64_t cases = 0;
  for (int rank = 0; rank < clients; ++rank) {
    const std::vector<std::string> words = absl::StrSplit(job.workers[rank].Stdout(), ' ');
    ASSERT_GE(words.size(), 2u) << "rank " << rank << " said " << job.workers[rank].Stdout();
    uint64_t said = 0;
    ASSERT_TRUE(absl::SimpleAtoi(words[1], &said)) << job.workers[rank].Stdout();
    if (rank == 0) cases = said;
    EXPECT_EQ(said, cases) << "rank " << rank;
  }
  EXPECT_GT(cases, 0u);
  auto status = job.daemon->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().errors(), 0u);
  EXPECT_EQ(status->totals().collectives(), cases);
  EXPECT_EQ(status->totals().requests(), cases * static_cast<uint64_t>(clients));
  ExpectCleanStop(*job.daemon);
}

INSTANTIATE_TEST_SUITE_P(Clients, RootedTest, ::testing::Values(2, 3, 4),
                         [](const auto& test) { return absl::StrCat(test.param, "Clients"); });

struct MismatchParam {
  std::string kind;
  int clients;
  std::string expected;  // the line every rank prints
};

void PrintTo(const MismatchParam& param, std::ostream* os) {
  *os << param.kind << " with " << param.clients << " clients";
}

class RootedMismatchTest : public ::testing::TestWithParam<MismatchParam> {};

TEST_P(RootedMismatchTest, EveryRankGetsTheSameErrorAndTheJobGoesOn) {
  const MismatchParam param = GetParam();
  Job job;
  ASSERT_NO_FATAL_FAILURE(
      RunJob(job, SmallMemoryFlags(), param.clients, {"rooted-mismatch", "--kind", param.kind}));
  EXPECT_EQ(job.failures, "");
  for (int rank = 0; rank < param.clients; ++rank) {
    EXPECT_EQ(job.workers[rank].Stdout(), param.expected + "\n") << "rank " << rank;
  }
  auto status = job.daemon->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().errors(), static_cast<uint64_t>(param.clients));
  ExpectCleanStop(*job.daemon);
}

std::vector<MismatchParam> MismatchParams() {
  std::vector<MismatchParam> params;
  for (int n : {2, 3, 4}) {
    params.push_back({"root", n,
                      absl::StrCat("error: FAILED_PRECONDITION: Mismatched reduce root ranks for "
                                   "'bad': rank 0 sent 0, rank ",
                                   n - 1, " sent 1")});
    params.push_back({"dtype", n,
                      absl::StrCat("error: FAILED_PRECONDITION: Mismatched data types for 'bad': "
                                   "rank 0 sent float32, rank ",
                                   n - 1, " sent int32")});
    std::string asked;
    for (int r = 0; r < n; ++r) absl::StrAppend(&asked, r == 0 ? "" : ", ", r == n - 1 ? 3 : 2);
    params.push_back(
        {"rows", n,
         absl::StrCat("error: FAILED_PRECONDITION: Mismatched scatter rows for 'bad': the ranks "
                      "of process set 0 ask for [",
                      asked, "] rows, ", 2 * n + 1, " in all, but root rank 0 sent ", 2 * n,
                      " rows; the rows every rank receives must add up to the root's first "
                      "dimension")});
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Kinds, RootedMismatchTest, ::testing::ValuesIn(MismatchParams()),
                         [](const auto& test) {
                           return absl::StrCat(test.param.kind, "_", test.param.clients, "Clients");
                         });

}  // namespace
}  // namespace collective::testing
