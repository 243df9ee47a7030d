// Errors a job survives: mismatched allreduce arguments across ranks (every
// rank hears the same error naming the tensor, both values and both ranks),
// duplicate outstanding names, and arguments the client library refuses at
// the call. After each, the same clients go on to a correct allreduce.
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

constexpr absl::Duration kWorkerTimeout = absl::Seconds(30);

struct MismatchParam {
  std::string kind;
  int clients;
};

void PrintTo(const MismatchParam& param, std::ostream* out) {
  *out << param.kind << " with " << param.clients << " clients";
}

// The message every rank must receive when the last rank deviates in `kind`
// (see the worker's mismatch scenario: rank 0 sends float32 [6], sum,
// prescale 1, postscale 1).
std::string ExpectedMismatch(const MismatchParam& param) {
  // What differs, and what rank 0 and the last rank sent.
  struct Difference {
    std::string what, first, odd;
  };
  const std::map<std::string, Difference> differences = {
      {"dtype", {"data types", "float32", "int32"}},
      {"shape", {"allreduce tensor shapes", "[6]", "[2, 3]"}},
      {"op", {"reduce ops", "sum", "max"}},
      {"prescale", {"prescale factors", "1", "0.5"}},
      {"postscale", {"postscale factors", "1", "3"}},
  };
  const Difference& d = differences.at(param.kind);
  return absl::StrCat("Mismatched ", d.what, " for 'bad': rank 0 sent ", d.first, ", rank ",
                      param.clients - 1, " sent ", d.odd);
}

class MismatchTest : public ::testing::TestWithParam<MismatchParam> {};

TEST_P(MismatchTest, EveryRankGetsTheSameErrorAndTheJobGoesOn) {
  const MismatchParam param = GetParam();
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto workers = (*daemon)->StartWorkers(TestWorkerBinary(), param.clients,
                                         {"mismatch", "--kind", param.kind});
  ASSERT_TRUE(workers.ok()) << workers.status();
  // The scenario itself checks that the allreduce after the mismatch works.
  EXPECT_EQ(WaitForWorkers(*workers, kWorkerTimeout), "");
  const std::string expected = ExpectedMismatch(param);
  for (size_t rank = 0; rank < workers->size(); ++rank) {
    EXPECT_EQ((*workers)[rank].Stdout(),
              absl::StrCat("error: FAILED_PRECONDITION: ", expected, "\n"))
        << "rank " << rank;
  }

  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->totals().errors(), static_cast<uint64_t>(param.clients));
  EXPECT_EQ(status->totals().collectives(), 1u);  // the correct one after the mismatch
  EXPECT_NE((*daemon)->process().Stderr().find(expected), std::string::npos)
      << "the daemon should log the mismatch; its log:\n"
      << (*daemon)->process().Stderr();
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  EXPECT_TRUE((*daemon)->Segments().empty());
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, MismatchTest,
    ::testing::Values(MismatchParam{"dtype", 2}, MismatchParam{"shape", 2}, MismatchParam{"op", 2},
                      MismatchParam{"prescale", 2}, MismatchParam{"postscale", 2},
                      MismatchParam{"dtype", 4}, MismatchParam{"shape", 4}, MismatchParam{"op", 4},
                      MismatchParam{"prescale", 4}, MismatchParam{"postscale", 4}),
    [](const auto& test_info) {
      return absl::StrCat(test_info.param.kind, test_info.param.clients, "Clients");
    });

TEST(DuplicateNameTest, RefusedAtOnceAndReusableAfterCompletion) {
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto workers = (*daemon)->StartWorkers(TestWorkerBinary(), 2, {"duplicate"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, kWorkerTimeout), "");
  for (size_t rank = 0; rank < workers->size(); ++rank) {
    EXPECT_EQ((*workers)[rank].Stdout(),
              absl::StrCat("error: ALREADY_EXISTS: tensor 'dup.", rank,
                           "' is already outstanding on this rank; a name can be submitted again "
                           "only after its collective has completed\n"));
  }
  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  // The refusals happened in the clients: per rank's turn, the daemon saw
  // 'dup.R', 'sync.R' and 'dup.R' again, all good.
  EXPECT_EQ(status->totals().errors(), 0u);
  EXPECT_EQ(status->totals().collectives(), 6u);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  EXPECT_TRUE((*daemon)->Segments().empty());
}

TEST(ArgumentErrorTest, ClientLibraryRefusesAtTheCall) {
  auto flags = SmallMemoryFlags();
  flags.insert(flags.end(), {"--max-name-bytes", "16"});
  auto daemon = DaemonProcess::Start({.flags = flags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto workers = (*daemon)->StartWorkers(TestWorkerBinary(), 2, {"bad-args"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(WaitForWorkers(*workers, kWorkerTimeout), "");
  for (auto& worker : *workers) {
    EXPECT_EQ(worker.Stdout(),
              "bool-sum: INVALID_ARGUMENT: tensor 'flags': reduce op sum is not defined for bool "
              "tensors (bool supports min and max)\n"
              "adasum-int: INVALID_ARGUMENT: tensor 'counts': reduce op adasum is not defined for "
              "int32 tensors (it supports float16, bfloat16, float32 and float64)\n"
              "empty-name: INVALID_ARGUMENT: the tensor name is empty\n"
              "negative-dim: INVALID_ARGUMENT: tensor 'grad': negative dimension -2\n"
              "long-name: INVALID_ARGUMENT: tensor name of 17 bytes exceeds the limit of 16\n"
              "ok\n");
  }
  auto status = (*daemon)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  // Nothing refused reached the daemon; only the valid allreduce did.
  EXPECT_EQ(status->totals().errors(), 0u);
  EXPECT_EQ(status->totals().requests(), 2u);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  EXPECT_TRUE((*daemon)->Segments().empty());
}

}  // namespace
}  // namespace collective::testing
