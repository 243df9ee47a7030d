// The one job a daemon serves at a time: its members by local rank, how it
// forms, how it ends, and the registrations that wait for it to go. Touched
// only by the engine thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/job/client_record.h"
#include "daemon/job/job_doorbell.h"
#include "daemon/job/node_layout.h"
#include "daemon/job/process_sets.h"
#include "daemon/job/result_arena.h"

namespace collective::daemon::job {

enum class JobState {
  kForming,  // waiting for local ranks to register
  kRunning,
  kEnding,  // a rank left: nothing can complete any more
  kFailed,  // a rank died or the job was aborted
};

// "forming", "running", "ending", "failed".
absl::string_view JobStateName(JobState state);

class Job {
 public:
  Job(std::string id, int32_t local_size, uint64_t sequence,
      std::chrono::steady_clock::time_point formation_deadline);
  // Removes the doorbell's name: the engine may still hold its mapping for
  // one loop, but the job's segments are gone once the job is.
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& id() const { return id_; }
  int32_t local_size() const { return local_size_; }
  uint64_t sequence() const { return sequence_; }
  JobState state() const { return state_; }
  // Ending or failed: it waits only for its members to go.
  bool ended() const { return state_ == JobState::kEnding || state_ == JobState::kFailed; }
  // Why the job is ending or failed; OK while forming or running.
  const absl::Status& failure() const { return failure_; }
  std::chrono::steady_clock::time_point formation_deadline() const { return formation_deadline_; }
  absl::Time formed_at() const { return formed_at_; }

  // Members, indexed by local rank; null where a rank has not registered.
  const std::vector<std::unique_ptr<ClientRecord>>& members() const { return members_; }
  ClientRecord* member(int32_t local_rank) const { return members_[local_rank].get(); }
  void AddMember(std::unique_ptr<ClientRecord> client);
  std::unique_ptr<ClientRecord> RemoveMember(int32_t local_rank);
  ClientRecord* FindClient(uint64_t client_id) const;
  ClientRecord* FindByLink(const SessionLink* link) const;

  std::vector<int32_t> MissingLocalRanks() const;
  bool complete() const { return MissingLocalRanks().empty(); }
  bool empty() const;
  // Every member has left or gone.
  bool finished() const;

  // All ranks of every node are in: assign topologies from `layout`,
  // create the static process sets (every member asked for the same ones),
  // take the result arena and the doorbell, run.
  absl::Status Form(std::unique_ptr<ResultArena> results, std::shared_ptr<JobDoorbell> doorbell,
                    const std::vector<std::vector<int32_t>>& static_process_sets,
                    const NodeLayout& layout);
  const NodeLayout& layout() const { return layout_; }
  ResultArena* results() const { return results_.get(); }
  const std::shared_ptr<JobDoorbell>& doorbell() const { return doorbell_; }
  ProcessSetTable& process_sets() { return *process_sets_; }
  const ProcessSetTable& process_sets() const { return *process_sets_; }

  // First reason wins; later calls keep it. Fail overrides End.
  void End(absl::Status why);
  void Fail(absl::Status why);

  // Registrations that came after the job ended: a rank that shut down and
  // initialised again before the others had left (Horovod's tests and
  // elastic training do), or the next job. Each waits, until its deadline,
  // for this job to be torn down, and then registers afresh.
  struct WaitingRegistration {
    std::shared_ptr<RegisterCall> call;
    std::chrono::steady_clock::time_point deadline;
  };
  std::vector<WaitingRegistration>& waiting() { return waiting_; }
  const std::vector<WaitingRegistration>& waiting() const { return waiting_; }

 private:
  std::string id_;
  int32_t local_size_;
  uint64_t sequence_;
  std::chrono::steady_clock::time_point formation_deadline_;
  JobState state_ = JobState::kForming;
  absl::Status failure_;
  absl::Time formed_at_;
  std::vector<std::unique_ptr<ClientRecord>> members_;
  std::unique_ptr<ResultArena> results_;
  std::shared_ptr<JobDoorbell> doorbell_;
  std::unique_ptr<ProcessSetTable> process_sets_;
  NodeLayout layout_;
  std::vector<WaitingRegistration> waiting_;
};

// "local ranks 2, 3" / "local rank 1".
std::string DescribeLocalRanks(const std::vector<int32_t>& ranks);

// "rank 2 (pid 1234)": how error messages name a member.
std::string DescribeMember(const ClientRecord& client);

// "rank 1 (pid 12) has" / "rank 1 (pid 12) and rank 3 (pid 14) have": the
// members that have not left, as the subject of a sentence; empty if none.
std::string DescribeStillIn(const Job& job);

// The error every rank gets when `client` truncated its own segment under the
// daemon (DATA_LOSS).
absl::Status SegmentTruncated(const ClientRecord& client);

// Who may open the job's result and doorbell segments. Preferably the members' common
// primary gid, read-only by group (0440) with the daemon as owner, so that no
// client owns (and could resize) the segment; else their common uid (0400).
// Members with neither in common cannot share results safely: an error says
// so. The daemon guards the mapping either way (SigbusGuard).
struct ResultSegmentOwner {
  uid_t uid;
  gid_t gid;
  mode_t mode;
  // The doorbell's: the same readers may also write.
  mode_t writable_mode() const { return mode | (mode >> 1); }
};
absl::StatusOr<ResultSegmentOwner> ChooseResultSegmentOwner(const Job& job, uid_t daemon_uid,
                                                            gid_t daemon_gid);

}  // namespace collective::daemon::job
