// A job's shared-memory segments go with the job, even where the engine
// still holds the doorbell's mapping for one more loop.
#include "daemon/job/job.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "daemon/job/client_record.h"
#include "daemon/job/job_doorbell.h"
#include "daemon/job/node_layout.h"
#include "daemon/job/result_arena.h"

namespace collective::daemon::job {
namespace {

std::string UniqueName(const std::string& what) {
  return absl::StrCat("collective-job-test-", ::getpid(), "-", what);
}

bool ShmExists(const std::string& name) { return std::filesystem::exists("/dev/shm/" + name); }

TEST(JobTest, ItsSegmentsGoWithItWhileTheEngineStillRingsTheDoorbell) {
  auto results = ResultArena::Create({.name = UniqueName("results"),
                                      .data_bytes = 4096,
                                      .epoch = 3,
                                      .job_sequence = 1,
                                      .owner_uid = ::geteuid(),
                                      .owner_gid = ::getegid()});
  ASSERT_TRUE(results.ok()) << results.status();
  auto doorbell = JobDoorbell::Create({.name = UniqueName("doorbell"),
                                       .epoch = 3,
                                       .job_sequence = 1,
                                       .owner_uid = ::geteuid(),
                                       .owner_gid = ::getegid()});
  ASSERT_TRUE(doorbell.ok()) << doorbell.status();
  const std::string results_name = UniqueName("results");
  const std::string doorbell_name = (*doorbell)->segment().name();
  ASSERT_TRUE(ShmExists(results_name));
  ASSERT_TRUE(ShmExists(doorbell_name));

  auto job = std::make_unique<Job>("default", 1, 1, std::chrono::steady_clock::now());
  auto member = std::make_unique<ClientRecord>();
  member->id = 7;
  job->AddMember(std::move(member));
  std::shared_ptr<JobDoorbell> engine_copy = *doorbell;
  ASSERT_TRUE(job->Form(std::move(*results), std::move(*doorbell), {}, NodeLayout::Single(1)).ok());
  EXPECT_EQ(job->FindClient(7)->topology.size(), 1);

  job.reset();
  EXPECT_FALSE(ShmExists(results_name));
  EXPECT_FALSE(ShmExists(doorbell_name)) << "the doorbell's name outlived its job";
  // The engine's mapping still works until it lets go.
  engine_copy->word()->fetch_add(1);
  EXPECT_EQ(engine_copy->word()->load(), 1u);
}

}  // namespace
}  // namespace collective::daemon::job
