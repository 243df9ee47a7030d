// Barrier and join with a real daemon and 1 to 8 real client processes.
// Barrier: each rank enters last once, after the daemon shows every other
// rank blocked in it. Join (Horovod's): one rank joins first while the
// others go on with allreduces, to which it contributes zeros (averages
// still divide by the full size; the workers check every value bitwise),
// and with other collectives, which fail with a clear message; a chosen rank
// joins last, once the daemon lists every other rank as joined; every join
// returns that rank; then the job goes on with every collective.
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/integration/collectives_job.h"

namespace collective::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

class BarrierTest : public ::testing::TestWithParam<int> {};

TEST_P(BarrierTest, NobodyLeavesBeforeTheLastRankArrives) {
  const int clients = GetParam();
  Job job;
  ASSERT_NO_FATAL_FAILURE(RunJob(job, SmallMemoryFlags(), clients, {"barrier"}, kTimeout));
  EXPECT_EQ(job.failures, "");
  for (int rank = 0; rank < clients; ++rank) {
    // A barrier per rank of the job, then (with two ranks or more) one per
    // rank of a set without rank 0, and a last global one.
    int barriers = clients;
    if (clients >= 2) barriers += (rank == 0 ? 0 : clients - 1) + 1;
    EXPECT_EQ(job.workers[rank].Stdout(), absl::StrCat("ok ", barriers, " barriers\n"))
        << "rank " << rank;
  }
  auto status = job.daemon->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().errors(), 0u);
  ExpectCleanStop(*job.daemon);
}

INSTANTIATE_TEST_SUITE_P(Clients, BarrierTest, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& test_info) {
                           return absl::StrCat(test_info.param, "Clients");
                         });

struct JoinParam {
  int clients;
  int early;  // joins first
  int last;   // joins last
};

void PrintTo(const JoinParam& param, std::ostream* out) {
  *out << param.clients << " clients, rank " << param.early << " joins first, rank " << param.last
       << " last";
}

// What a rank that did not join early prints while `early` has joined.
std::string WhileJoined(int early) {
  const std::string refused = ": FAILED_PRECONDITION: ";
  std::string out = absl::StrCat("ok 22 allreduces with rank ", early, " joined\n");
  for (const char* collective : {"allgather", "broadcast", "alltoall", "reducescatter"}) {
    absl::StrAppend(&out, collective, refused, collective, " of 'join.", collective,
                    "' cannot run while rank ", early,
                    " of process set 0 has joined: after a join only allreduce carries on\n");
  }
  absl::StrAppend(&out, "barrier", refused, "barrier cannot run while rank ", early,
                  " of process set 0 has joined: after a join only allreduce carries on\n");
  return out;
}

class JoinTest : public ::testing::TestWithParam<JoinParam> {};

TEST_P(JoinTest, ZerosFromJoinedRanksAndEveryJoinReturnsTheLast) {
  const JoinParam param = GetParam();
  Job job;
  ASSERT_NO_FATAL_FAILURE(
      RunJob(job, SmallMemoryFlags(), param.clients,
             {"join", "--early", std::to_string(param.early), "--last", std::to_string(param.last)},
             kTimeout));
  EXPECT_EQ(job.failures, "");
  const std::string after = absl::StrCat("join returned ", param.last, "\nok after join\n");
  for (int rank = 0; rank < param.clients; ++rank) {
    const bool early = rank == param.early || param.clients == 1;
    EXPECT_EQ(job.workers[rank].Stdout(), early ? after : WhileJoined(param.early) + after)
        << "rank " << rank;
  }
  auto status = job.daemon->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  // The refused collectives, one error per rank that submitted them.
  const uint64_t refusals = param.clients == 1 ? 0 : 5 * static_cast<uint64_t>(param.clients - 1);
  EXPECT_EQ(status->totals().errors(), refusals);
  EXPECT_EQ(status->joined_ranks_size(), 0);
  ExpectCleanStop(*job.daemon);
}

INSTANTIATE_TEST_SUITE_P(Ranks, JoinTest,
                         ::testing::Values(JoinParam{1, 0, 0}, JoinParam{2, 0, 1},
                                           JoinParam{3, 1, 0}, JoinParam{4, 2, 1},
                                           JoinParam{4, 0, 3}, JoinParam{8, 5, 2}),
                         [](const auto& test_info) {
                           return absl::StrCat(test_info.param.clients, "Clients",
                                               test_info.param.early, "First", test_info.param.last,
                                               "Last");
                         });

}  // namespace
}  // namespace collective::testing
