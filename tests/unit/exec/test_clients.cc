#include "tests/unit/exec/test_clients.h"

#include <atomic>

#include <unistd.h>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "shm/client_segment.h"

namespace collective::daemon::exec {

std::unique_ptr<job::ClientRecord> NewTestClient(int32_t global_rank, uint64_t arena_bytes) {
  static std::atomic<int> counter{0};
  auto client = std::make_unique<job::ClientRecord>();
  client->id = static_cast<uint64_t>(global_rank) + 1;
  client->topology.set_rank(global_rank);
  auto segment = shm::ClientSegment::Create(
      {.name = absl::StrCat("collective-exec-test.", ::getpid(), ".", counter++),
       .arena_bytes = arena_bytes,
       .ring_capacity = 1,
       .submit_bytes = 0,
       .epoch = 1,
       .client_id = client->id,
       .client_pid = ::getpid(),
       .owner_uid = ::geteuid(),
       .owner_gid = ::getegid()});
  EXPECT_TRUE(segment.ok()) << segment.status();
  if (!segment.ok()) return nullptr;
  client->segment = std::move(*segment);
  client->segment->Unlink();
  return client;
}

}  // namespace collective::daemon::exec
