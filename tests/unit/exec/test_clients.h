// Clients of a fake job for tests of the executor's layer: a client record
// with a real segment (shm::ClientSegment) whose name is already gone from
// /dev/shm, so that nothing outlives the test.
#pragma once

#include <cstdint>
#include <memory>

#include "daemon/job/client_record.h"

namespace collective::daemon::exec {

// The client of global rank `global_rank`, with an arena of `arena_bytes`;
// null (and a test failure) if the segment could not be made.
std::unique_ptr<job::ClientRecord> NewTestClient(int32_t global_rank, uint64_t arena_bytes);

}  // namespace collective::daemon::exec
