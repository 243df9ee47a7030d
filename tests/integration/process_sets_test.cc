// Process sets with a real daemon and real client processes: static sets
// given at registration (listed in any order: a set is a set of ranks),
// sets added and removed at run time with ids reused smallest first, the
// per-set rank, size and membership queries, every collective within a set
// while the ranks outside it run collectives of their own, and the calls
// refused with INVALID_ARGUMENT — after which the same clients go on.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/collectives_job.h"

namespace collective::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

// Odd ranks and even ranks, each listed from the highest down: "3,1;2,0".
std::string OddAndEven(int clients) {
  std::vector<int> odd, even;
  for (int rank = clients - 1; rank >= 0; --rank) (rank % 2 == 1 ? odd : even).push_back(rank);
  return absl::StrCat(absl::StrJoin(odd, ","), ";", absl::StrJoin(even, ","));
}

std::string Name(const ::testing::TestParamInfo<int>& info) {
  return absl::StrCat(info.param, "Clients");
}

void ExpectNoErrors(DaemonProcess& daemon) {
  auto status = daemon.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  // Every refusal happened in the client library.
  EXPECT_EQ(status->totals().errors(), 0u);
  EXPECT_GT(status->totals().collectives(), 0u);
}

class StaticSetsTest : public ::testing::TestWithParam<int> {};

TEST_P(StaticSetsTest, GivenAtRegistrationUsedConcurrentlyAndIdOneReused) {
  const int clients = GetParam();
  Job job;
  ASSERT_NO_FATAL_FAILURE(RunJob(job, SmallMemoryFlags(), clients,
                                 {"static-sets", "--static-sets", OddAndEven(clients)}, kTimeout));
  EXPECT_EQ(job.failures, "");
  for (int rank = 0; rank < clients; ++rank) {
    EXPECT_EQ(job.workers[rank].Stdout(),
              "size of a removed set: INVALID_ARGUMENT: process set 1 does not exist\n"
              "ok static sets\n")
        << "rank " << rank;
  }
  ExpectNoErrors(*job.daemon);
  ExpectCleanStop(*job.daemon);
}

INSTANTIATE_TEST_SUITE_P(Clients, StaticSetsTest, ::testing::Values(2, 3, 4, 8), Name);

TEST(StaticSetsRegistrationTest, TheGlobalSetIsRefusedAtRegistrationAndTheDaemonGoesOn) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(RunJob(job, SmallMemoryFlags(), 1,
                                 {"static-sets", "--static-sets", "0", "--connect-fails"},
                                 kTimeout));
  EXPECT_EQ(job.failures, "");
  EXPECT_EQ(job.workers[0].Stdout(),
            "connect: INVALID_ARGUMENT: static process set [0]: process set [0] is the global "
            "process set (id 0), which always exists\n");
  // The same daemon serves the next job.
  auto workers = job.daemon->StartWorkers(CollectivesWorkerBinary(), 1, {"set-errors"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, kTimeout), "");
  ExpectCleanStop(*job.daemon);
}

class DynamicSetsTest : public ::testing::TestWithParam<int> {};

TEST_P(DynamicSetsTest, AddedRemovedAndIdsReusedSmallestFirst) {
  const int clients = GetParam();
  Job job;
  ASSERT_NO_FATAL_FAILURE(RunJob(job, SmallMemoryFlags(), clients, {"dynamic-sets"}, kTimeout));
  EXPECT_EQ(job.failures, "");
  for (int rank = 0; rank < clients; ++rank) {
    EXPECT_EQ(job.workers[rank].Stdout(),
              "included in a removed set: INVALID_ARGUMENT: process set 1 does not exist\n"
              "ok dynamic sets\n")
        << "rank " << rank;
  }
  ExpectNoErrors(*job.daemon);
  ExpectCleanStop(*job.daemon);
}

INSTANTIATE_TEST_SUITE_P(Clients, DynamicSetsTest, ::testing::Values(2, 3, 4, 8), Name);

// What rank `rank` of `clients` prints in the set-errors scenario.
std::string ExpectedSetErrors(int clients, int rank) {
  std::vector<int> everyone;
  for (int r = 0; r < clients; ++r) everyone.push_back(r);
  const std::string refused = ": INVALID_ARGUMENT: ";
  std::string out = absl::StrCat(
      "add the global set", refused, "process set [", absl::StrJoin(everyone, ", "),
      "] is the global process set (id 0), which always exists\n", "remove the global set", refused,
      "the global process set (id 0) cannot be removed\n", "remove an unknown set", refused,
      "process set 7 does not exist\n", "add a rank outside the job", refused, "rank ", clients,
      " is not a rank of the job (0 to ", clients - 1, ")\n", "add a rank twice", refused,
      "rank 0 is listed twice in the new process set\n", "allreduce on an unknown set", refused,
      "process set 9 does not exist\n");
  if (clients == 1) return out + "ok\n";
  absl::StrAppend(&out, "add an existing set", refused, "process set [0] exists already (id 1)\n");
  if (rank != 0) {
    const std::string not_member = absl::StrCat("rank ", rank, " is not a member of process set 1");
    for (const char* collective :
         {"allreduce", "grouped allreduce", "allgather", "grouped allgather", "broadcast",
          "alltoall", "reducescatter", "grouped reducescatter"}) {
      absl::StrAppend(&out, collective, refused, not_member, " [0]\n");
    }
    for (const char* call : {"barrier", "join", "rank query"}) {
      absl::StrAppend(&out, call, refused, not_member, "\n");
    }
  }
  absl::StrAppend(&out, "allreduce on a removed set", refused, "process set 1 does not exist\n",
                  "ok\n");
  return out;
}

class SetErrorsTest : public ::testing::TestWithParam<int> {};

TEST_P(SetErrorsTest, RefusedAtTheCallThenTheClientsGoOn) {
  const int clients = GetParam();
  Job job;
  ASSERT_NO_FATAL_FAILURE(RunJob(job, SmallMemoryFlags(), clients, {"set-errors"}, kTimeout));
  EXPECT_EQ(job.failures, "");
  for (int rank = 0; rank < clients; ++rank) {
    EXPECT_EQ(job.workers[rank].Stdout(), ExpectedSetErrors(clients, rank)) << "rank " << rank;
  }
  ExpectNoErrors(*job.daemon);
  ExpectCleanStop(*job.daemon);
}

INSTANTIATE_TEST_SUITE_P(Clients, SetErrorsTest, ::testing::Values(1, 2, 3), Name);

}  // namespace
}  // namespace collective::testing
