// For the tests that start collective-collectives-worker (the test binary is
// built with COLLECTIVES_WORKER_BINARY): where it is, and a job of its
// ranks against a daemon of the test's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {

inline std::string CollectivesWorkerBinary() { return COLLECTIVES_WORKER_BINARY; }

// The lines a worker printed, without the newlines.
inline std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// A daemon and `clients` workers playing `args` (the scenario first).
struct Job {
  std::unique_ptr<DaemonProcess> daemon;
  std::vector<Subprocess> workers;
  std::string failures;  // from WaitForWorkers: "" when every rank exited 0
};

// Starts the daemon with `flags` and the workers, and waits for them (up to
// `timeout`); asserts (fatally) only that everything could be started.
inline void RunJob(Job& job, const std::vector<std::string>& flags, int clients,
                   const std::vector<std::string>& args,
                   absl::Duration timeout = absl::Seconds(90)) {
  auto daemon = DaemonProcess::Start({.flags = flags});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  job.daemon = std::move(*daemon);
  auto workers = job.daemon->StartWorkers(CollectivesWorkerBinary(), clients, args);
  ASSERT_TRUE(workers.ok()) << workers.status();
  job.workers = std::move(*workers);
  job.failures = WaitForWorkers(job.workers, timeout);
}

// Waits until every worker has printed `line` (its stdout is a file the test
// reads while it runs), or fails the test at the deadline.
inline void AwaitSaid(std::vector<Subprocess>& workers, const std::string& line,
                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (size_t rank = 0; rank < workers.size(); ++rank) {
    while (!absl::StrContains(workers[rank].Stdout(), line)) {
      ASSERT_LT(absl::Now(), deadline) << "rank " << rank << " never said '" << line
                                       << "'; its stderr: " << workers[rank].Stderr();
      ASSERT_FALSE(workers[rank].Wait(absl::Milliseconds(5)).has_value())
          << "rank " << rank << " exited: " << workers[rank].Stderr();
    }
  }
}

// Stops the daemon: it must exit 0 and leave no segment behind.
inline void ExpectCleanStop(DaemonProcess& daemon) {
  EXPECT_TRUE(ExitedCleanly(daemon.Stop())) << daemon.process().Stderr();
  EXPECT_TRUE(daemon.Segments().empty());
}

}  // namespace collective::testing
