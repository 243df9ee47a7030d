// Registration and formation: a client's Register call is checked (the
// daemon's limits, the job's shape, the daemon's job and memory budgets),
// gets its segment, and joins its job's run — a new run for a job id the
// daemon does not serve, the forming run of its job, or (its job ended and
// its members are still leaving) a wait for that run to go. Once every
// local rank is in, the job forms: at once on a world of one node, after
// the exchange with the other nodes (WorldLink) otherwise. On an MPI world
// of daemons one job at a time forms across it. Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/v1/collective.pb.h"
#include "daemon/engine/gloo_formations.h"
#include "daemon/engine/job_run.h"
#include "daemon/engine/shared_parts.h"
#include "daemon/job/client_record.h"
#include "daemon/job/session_link.h"

namespace collective::daemon::engine {

// The runs of a daemon, oldest first.
using Runs = std::vector<std::unique_ptr<JobRun>>;

class Registrar {
 public:
  Registrar(SharedParts& parts, Runs& runs) : parts_(parts), runs_(runs), formations_(parts.wake) {}

  // A new registration, or one that waited for an ended run of its job to
  // go; the job it forms must have formed by `deadline`.
  void Register(std::shared_ptr<job::RegisterCall> call, Clock::time_point deadline);
  // The client gave up on its Register call.
  void Cancelled(uint64_t call_id);
  // The client opened its session: its registration is settled.
  void Attached(uint64_t client_id);
  // Formation deadlines and the deadlines of waiting registrations.
  void RunTimers(Clock::time_point now);
  // The exchange with the other nodes ended (on an MPI world of daemons).
  void Exchanged(absl::StatusOr<job::NodeLayout> layout);
  // Jobs whose worlds among resident daemons formed (or could not) since
  // the last look: they run, or fail. True if any did.
  bool TakeFormedWorlds();
  // The daemon stops: registrations fail with `status`.
  void Shutdown(const absl::Status& status);
  // The run of the job `job_id` that has not ended here, if any.
  JobRun* Find(const std::string& job_id) const;

 private:
  // What any registration must satisfy, whatever the daemon's jobs.
  absl::Status CheckRequest(const v1::RegisterRequest& request, const std::string& job_id) const;
  // Whether it fits its job's forming run.
  absl::Status CheckAgainstRun(const JobRun& run, const v1::RegisterRequest& request,
                               const std::vector<std::vector<int32_t>>& static_sets) const;
  // Whether the daemon can take a new job, or another client's arena.
  absl::Status CheckBudgets(const v1::RegisterRequest& request, const std::string& job_id,
                            bool new_job) const;
  absl::StatusOr<std::unique_ptr<job::ClientRecord>> NewClient(const job::RegisterCall& call);
  // Every local rank registered: form the job here (one node), start
  // forming its world through its rendezvous, or start the exchange with
  // the other nodes of the MPI world.
  void Form(JobRun& run);
  void FormThroughRendezvous(JobRun& run, const job::ClientRecord& first);
  // The run's job did not form: its registrations fail with `status`.
  void Abort(JobRun& run, const absl::Status& status);
  void Remove(JobRun& run);

  SharedParts& parts_;
  Runs& runs_;
  absl::flat_hash_map<uint64_t, uint64_t> registrations_;  // call id -> client id
  uint64_t next_client_id_ = 1;
  uint64_t next_job_sequence_ = 1;
  JobRun* exchanging_ = nullptr;  // the run forming across the MPI world
  // Worlds among resident daemons, formed off the engine thread; by job
  // sequence, the runs whose world is forming, and how many times each job
  // id formed through a rendezvous here (the generation that keeps a
  // re-formed job's keys apart from its earlier world's).
  GlooFormations formations_;
  absl::flat_hash_set<uint64_t> forming_worlds_;
  absl::flat_hash_map<std::string, uint64_t> world_generations_;
};

}  // namespace collective::daemon::engine
