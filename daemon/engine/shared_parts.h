// What the job runs of a daemon share, owned by the Engine and lent to each
// JobRun through its constructor: the configuration, the names of segments,
// the executor and its threads, the GPU path, the timeline, the metrics and
// the daemon's totals, and the link to the other daemons. Engine thread
// only, like everything a run touches.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <sys/types.h>

#include "absl/status/status.h"
#include "collective/v1/status.pb.h"
#include "config/daemon_config.h"
#include "daemon/exec/executor.h"
#include "daemon/exec/thread_pool.h"
#include "daemon/gpu/device_path.h"
#include "daemon/observe/metrics.h"
#include "daemon/observe/timeline.h"
#include "shm/segment_names.h"

namespace collective::daemon::engine {

class WorldLink;

struct SharedParts {
  const config::DaemonConfig& config;
  uint64_t epoch;
  uid_t daemon_uid;
  gid_t daemon_gid;
  const shm::SegmentNames& names;
  exec::ThreadPool& pool;
  exec::Executor& executor;
  gpu::DevicePath& gpu;  // each run's part is its own GpuExecutor
  observe::Timeline& timeline;
  observe::Metrics& metrics;
  v1::Totals& totals;
  WorldLink& world;
  // Wakes the engine thread (a transfer ended on another thread).
  std::function<void()> wake;
  // FAILED_PRECONDITION if a timeline (the daemon's or a job's) records to
  // the path: two timelines writing one file would interleave.
  std::function<absl::Status(const std::string& path)> check_timeline_path;
};

}  // namespace collective::daemon::engine
