// Forms the worlds of jobs among resident daemons, off the engine thread:
// forming one meets the other nodes' daemons through the job's rendezvous
// (an HTTP store) and connects to them, which blocks until every node came
// or the job's registration deadline passed. One thread per forming job;
// the engine takes what they formed (Take) when they wake it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "daemon/engine/gloo_job_world.h"
#include "daemon/gloo/job_world.h"

namespace collective::daemon::engine {

class GlooFormations {
 public:
  struct Request {
    uint64_t job_sequence = 0;  // which run asked
    std::string rendezvous;     // HOST:PORT of the job's store
    gloo::JobWorldOptions world;
  };
  struct Done {
    uint64_t job_sequence = 0;
    absl::StatusOr<FormedWorld> formed;
  };

  // `wake`: wakes the engine once a formation ended.
  explicit GlooFormations(std::function<void()> wake) : wake_(std::move(wake)) {}
  // Cancels the formations still waiting at their rendezvous (the daemon
  // stops) and waits for their threads: a formation already connecting to
  // the other nodes ends by its deadline.
  ~GlooFormations();
  GlooFormations(const GlooFormations&) = delete;
  GlooFormations& operator=(const GlooFormations&) = delete;

  void Start(Request request);
  // The formations that ended since the last Take (their threads joined).
  std::vector<Done> Take();

 private:
  struct Running {
    std::thread thread;
    bool ended = false;  // guarded by mutex_
    std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  };

  const std::function<void()> wake_;
  mutable std::mutex mutex_;
  std::vector<Done> done_;  // guarded by mutex_
  // Threads are joined by the Take after they ended (engine thread only;
  // `ended` guarded by mutex_).
  std::list<Running> threads_;
};

}  // namespace collective::daemon::engine
