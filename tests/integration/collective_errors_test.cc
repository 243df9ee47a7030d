// Errors of the collectives beyond allreduce that a job survives, with a
// real daemon and real client processes. Arguments that disagree across
// ranks (dtype, shape — for allgather and alltoall every dimension but the
// first —, op, root, scale factors, grouping, the collective itself): one
// error with the exact text, received by every rank. Arguments the client
// library refuses at the call (splits, scalars, reducescatter ops, roots,
// duplicate names). After each, the same clients run every collective
// correctly. (Collectives refused while a rank has joined: join_test.cc;
// what only the daemon can catch: collective_wire_errors_test.cc.)
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/collectives_job.h"
#include "tests/integration/mismatch_text.h"

namespace collective::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

class MismatchTest : public ::testing::TestWithParam<MismatchParam> {};

TEST_P(MismatchTest, EveryRankGetsTheSameErrorAndTheJobGoesOn) {
  const MismatchParam param = GetParam();
  Job job;
  ASSERT_NO_FATAL_FAILURE(
      RunJob(job, SmallMemoryFlags(), param.clients,
             {"mismatch", "--collective", param.collective, "--kind", param.kind}, kTimeout));
  // The scenario itself checks every collective after the mismatch.
  EXPECT_EQ(job.failures, "");
  std::string expected = ExpectedMismatch(param);
  if (param.kind == "group") expected += ExpectedMismatch(param, "bad.partner");
  for (int rank = 0; rank < param.clients; ++rank) {
    EXPECT_EQ(job.workers[rank].Stdout(), expected) << "rank " << rank;
  }
  auto status = job.daemon->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  const uint64_t tensors = param.kind == "group" ? 2 : 1;
  EXPECT_EQ(status->totals().errors(), tensors * static_cast<uint64_t>(param.clients));
  // The daemon logs the text it sent (without the worker's prefix).
  const std::string line = ExpectedMismatch(param);
  const std::string text =
      line.substr(line.find("Mismatched"), line.size() - 1 - line.find("Mismatched"));
  EXPECT_NE(job.daemon->process().Stderr().find(text), std::string::npos)
      << "the daemon should log the mismatch; its log:\n"
      << job.daemon->process().Stderr();
  ExpectCleanStop(*job.daemon);
}

std::vector<MismatchParam> MismatchParams() {
  const std::map<std::string, std::vector<std::string>> kinds = {
      {"allreduce", {"dtype", "shape", "op", "prescale", "postscale", "group", "collective"}},
      {"allgather", {"dtype", "shape", "rank", "group"}},
      {"broadcast", {"dtype", "shape", "root", "collective"}},
      {"alltoall", {"dtype", "shape", "rank"}},
      {"reducescatter", {"dtype", "shape", "op", "prescale", "postscale", "group"}},
  };
  std::vector<MismatchParam> params;
  for (const auto& [collective, list] : kinds) {
    for (const std::string& kind : list) {
      // 2, 3 and 4 ranks in turn.
      params.push_back({collective, kind, 2 + static_cast<int>(params.size() % 3)});
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Kinds, MismatchTest, ::testing::ValuesIn(MismatchParams()),
                         [](const auto& test_info) {
                           return absl::StrCat(test_info.param.collective, "_",
                                               test_info.param.kind, "_", test_info.param.clients,
                                               "Clients");
                         });

// What every rank of `clients` prints in the call-errors scenario.
std::string ExpectedCallErrors(int clients) {
  const int n = clients;
  const std::string invalid = ": INVALID_ARGUMENT: ";
  std::string out =
      absl::StrCat("splits count", invalid, "alltoall of 'a2a': ", n + 1,
                   " splits for a process set of ", n, " ranks\n", "negative split", invalid,
                   "alltoall of 'a2a': split -1 is negative\n", "splits sum", invalid,
                   "alltoall of 'a2a': the splits [", absl::StrJoin(std::vector<int>(n, 1), ", "),
                   "] add up to ", n, " rows, not the first dimension ", n + 1, "\n");
  if (n > 1) {
    absl::StrAppend(&out, "uneven without splits", invalid,
                    "alltoall of 'a2a': the first dimension ", n + 1,
                    " does not divide evenly among ", n,
                    " ranks; pass splits to say how many rows go to each rank\n");
  }
  for (const auto& [label, what] : std::vector<std::pair<std::string, std::string>>{
           {"alltoall", "a2a"}, {"allgather", "ag"}, {"reducescatter", "rs"}}) {
    absl::StrAppend(&out, label, " of a scalar", invalid, label, " of '", what,
                    "' needs a tensor of at least one dimension (its rows)\n");
  }
  for (const char* op : {"min", "max"}) {
    absl::StrAppend(&out, "reducescatter ", op, invalid,
                    "reducescatter supports the sum and average reduce ops\n");
  }
  for (const auto& [label, root] : std::vector<std::pair<std::string, int>>{
           {"broadcast root past the end", n}, {"negative broadcast root", -1}}) {
    absl::StrAppend(&out, label, invalid, "broadcast of 'bc': root rank ", root,
                    " is not a rank of process set 0 (size ", n, ")\n");
  }
  const auto duplicate = [](const std::string& name) {
    return absl::StrCat(": ALREADY_EXISTS: tensor '", name,
                        "' is already outstanding on this rank; a name can be submitted again "
                        "only after its collective has completed\n");
  };
  for (const char* collective :
       {"allreduce", "allgather", "broadcast", "alltoall", "reducescatter"}) {
    const std::string name = absl::StrCat("dup.", collective);
    absl::StrAppend(&out, "duplicate ", collective, duplicate(name), "duplicate ", collective,
                    " as allreduce", duplicate(name));
  }
  for (const char* collective : {"allreduce", "allgather", "reducescatter"}) {
    absl::StrAppend(&out, "duplicate in a grouped ", collective, duplicate("dup.g"));
  }
  return out + "ok\n";
}

class CallErrorsTest : public ::testing::TestWithParam<int> {};

TEST_P(CallErrorsTest, RefusedAtTheCallThenTheClientsGoOn) {
  const int clients = GetParam();
  Job job;
  ASSERT_NO_FATAL_FAILURE(RunJob(job, SmallMemoryFlags(), clients, {"call-errors"}, kTimeout));
  EXPECT_EQ(job.failures, "");
  for (int rank = 0; rank < clients; ++rank) {
    EXPECT_EQ(job.workers[rank].Stdout(), ExpectedCallErrors(clients)) << "rank " << rank;
  }
  auto status = job.daemon->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  // Nothing refused reached the daemon.
  EXPECT_EQ(status->totals().errors(), 0u);
  ExpectCleanStop(*job.daemon);
}

INSTANTIATE_TEST_SUITE_P(Clients, CallErrorsTest, ::testing::Values(1, 2, 4),
                         [](const auto& test_info) {
                           return absl::StrCat(test_info.param, "Clients");
                         });

}  // namespace
}  // namespace collective::testing
