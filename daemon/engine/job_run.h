// One job's run on this daemon, from its first registration to its last
// member's departure: the object that owns everything that lives as long as
// the job — its members and segments (job::Job), its coordinator and the
// work ready to run, its intake and completion, its point-to-point
// messages, its GPU batches, its autotuning, its stall inspector, its own
// timeline, and its state across nodes (it is AcrossNodes' host). The Engine creates a run
// when a job's first rank registers, drives it from its loop, and destroys
// it once done() — the destructor is the teardown. Nothing of a run reaches
// another run. Engine thread only.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collective/v1/status.pb.h"
#include "daemon/engine/across_nodes.h"
#include "daemon/engine/completion.h"
#include "daemon/engine/engine_events.h"
#include "daemon/engine/intake.h"
#include "daemon/engine/job_tuning.h"
#include "daemon/engine/job_world.h"
#include "daemon/engine/point_to_point.h"
#include "daemon/engine/shared_parts.h"
#include "daemon/exec/fusion.h"
#include "daemon/job/job.h"
#include "daemon/negotiation/coordinator.h"
#include "daemon/negotiation/stall_inspector.h"
#include "daemon/observe/metrics.h"
#include "daemon/observe/timeline.h"

namespace collective::daemon::engine {

class JobRun final : public AcrossNodes::Host, public Intake::Run, public PointToPoint::Run {
 public:
  JobRun(SharedParts& parts, std::unique_ptr<job::Job> job);
  ~JobRun() override;
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  job::Job& job() override { return *job_; }
  const job::Job& job() const { return *job_; }
  // Everything of the job ended here: the engine destroys the run.
  bool done() const { return done_; }

  // Every rank of every node registered and `layout` says where they are:
  // the result and doorbell segments, the process sets, the groups of the
  // sets across nodes in `world` (the job's daemons' world; null for a job
  // of one node), and the answers to the registrations. An error: the job
  // did not form (the caller answers the registrations with it and
  // destroys the run).
  absl::Status Form(const job::NodeLayout& layout, std::unique_ptr<JobWorld> world);

  // A session's message: attach (`client`: the member its id names, or
  // null), leave, or a broken protocol (`client`: the session's member).
  void OnClientMessage(ClientMessageEvent& event, job::ClientRecord* client);
  // A session that names no client of any run, or a wrong token.
  static void RefuseSession(job::SessionLink& link, const job::PeerCredentials& peer,
                            uint64_t client_id);
  void OnSessionClosed(job::ClientRecord& client);
  // A formed job's client gave up before it opened its session.
  void RegistrationCancelled(job::ClientRecord& client);

  // The job cannot continue: every pending request fails with `why`, every
  // attached client hears it, and later submissions fail with it too. Across
  // nodes the other nodes hear it as well, unless it came from them.
  enum class Origin { kHere, kOtherNode };
  void Fail(const absl::Status& why, Origin origin = Origin::kHere);
  // A rank left: nothing can complete any more.
  void End(const absl::Status& why, Origin origin = Origin::kHere);
  // MPI is abandoned: nothing decided across nodes can finish.
  void AbandonDecided(const absl::Status& why);
  // The daemon stops: every request fails with `status`, every session ends.
  void Shutdown(const absl::Status& status);

  // The loop's turns, in order; each says whether anything happened.
  bool Drain() { return intake_.Drain(*job_); }
  bool PollOtherNodes(Clock::time_point now);
  bool Advance() { return across_.Advance(); }
  bool RunReady();
  // Announcements wait to be sent by the next PollOtherNodes.
  bool unsent() const { return across_.unsent(); }
  // The coordinator holds nothing (what ran drained it).
  bool idle() const { return coordinator_ == nullptr || coordinator_->idle(); }

  // Timers: stalls, attach deadlines, the GPU's health, formation.
  void RunTimers(Clock::time_point now);
  Clock::time_point NextTimer(Clock::time_point now, Clock::time_point next) const;
  // Another daemon owes this one a decision, a transfer's other half or a
  // message's: the engine looks again at once rather than sleeping.
  bool OwedByOtherNodes() const;
  // Across nodes: when the engine must next look for the others' messages.
  Clock::time_point NextPollOfOtherNodes(Clock::time_point now) const;
  bool spans_nodes() const { return across_.view().active(); }
  bool waits_for_decisions() const;
  bool transferring() const { return across_.transferring() || p2p_->moving(); }

  void WriteHeartbeats(uint64_t now_ns);
  // The timeline of this job alone (collectivectl timeline start --job);
  // it ends, its file complete, with the run.
  observe::Timeline& timeline() { return timeline_; }
  // Tells every client whether to report copy-out spans: whether the
  // daemon's timeline or the job's records.
  void PublishTimelineState();
  void AttachedClients(std::vector<shm::ClientSegmentHeader*>& out) const;
  // A batch on the GPU is done: its timeline rows end.
  void DeviceDone(uint64_t batch, Clock::time_point started) {
    completion_.DeviceDone(batch, started);
  }

  // For status and metrics (job_status.cc).
  void Describe(Clock::time_point now, v1::JobReport& report) const;
  void AddGauges(Clock::time_point now, observe::Metrics::Gauges& gauges) const;
  void DescribeTuning(v1::AutotuneStatus* out) const { tuning_.Describe(out); }
  // What the job's negotiation across nodes counted so far.
  void AddLiveTotals(v1::Totals& totals) const { across_.view().AddTo(totals); }
  const Completion& completion() const { return completion_; }

  // AcrossNodes::Host (and job(), above).
  void RefuseAfterJoin(int32_t process_set_id, int32_t first_joined) override;
  void FailTensor(const negotiation::ReadyTensor& tensor, const absl::Status& why) override {
    completion_.FailTensor(tensor, why);
  }
  void Negotiated(const negotiation::ReadyTensor& tensor) override {
    completion_.RecordNegotiation(tensor);
  }
  void RunControl(const negotiation::ReadyTensor& tensor) override;
  void RunOnDevice(std::vector<exec::FusedBatch> batches) override;
  void Finished(exec::FusedBatch batch, exec::Executor::Outcome outcome,
                std::unique_ptr<exec::CrossNodeRun> run, absl::Status status) override;
  void BreakAndFail(const absl::Status& why) override;
  void MaybeTearDown() override;
  void Tuned(const v1::Tuning& tuning) override { tuning_.OnTuned(tuning); }

  // Intake::Run.
  void Admitted(job::ClientRecord& client, v1::TensorRequest& request,
                const job::ProcessSet& set) override;
  void RegisterCuda(job::ClientRecord& client, const v1::RegisterCuda& message) override;
  void Drop(job::ClientRecord& client, const absl::Status& why) override;

  // PointToPoint::Run.
  void LostOtherNodes(const absl::Status& why) override;
  void AbandonWorld(const absl::Status& why) override;
  void Moved() override { KeepPollingFast(); }

 private:
  void Attach(const std::shared_ptr<job::SessionLink>& link, const job::PeerCredentials& peer,
              const v1::Attach& attach, job::ClientRecord* client);
  void Leave(job::ClientRecord& client);
  // A client that is gone: its segment, results and CUDA registrations.
  void Forget(job::ClientRecord& client);
  // Fails what is not decided across nodes (or anything, on one node).
  void FailUndecided(const absl::Status& why);
  // Runs the fused batches waiting for result space, in order.
  bool RunDeferred();
  // Runs the batch of CUDA tensors at the front of deferred_; false when it
  // waits for result space (alltoall's received splits).
  bool RunDeviceBatch();
  // Tells the other nodes that the job failed or ended here.
  void TellOtherNodes(v1::JobEvent::Kind kind, const absl::Status& why);
  // Another node's word on the job.
  void OnJobEvent(int from, const v1::JobEvent& event);
  // The negotiation moved: look for the other daemons' next message often
  // for a while (two cycles).
  void KeepPollingFast();
  void CheckStalls(Clock::time_point now);
  // On nodes but 0: tensors partly submitted here for a while, so that node
  // 0's stall report names exactly the missing ranks.
  void ReportPartialToNodeZero(Clock::time_point now);
  // Tensors some ranks wait on, this node's merged with node 0's view across
  // nodes; `with_announced`: also those ready here and waiting for node 0
  // (for status, not for the stall inspector).
  std::vector<negotiation::WaitingTensor> AllWaiting(bool with_announced) const;
  void CheckAttachDeadlines(Clock::time_point now);
  // The job's own timeline, where its global rank 0 registered here asking
  // for one (HOROVOD_TIMELINE).
  void StartAskedTimeline();
  void CheckGpu(Clock::time_point now);

  SharedParts& parts_;
  const config::DaemonConfig& config_;
  std::unique_ptr<job::Job> job_;
  JobTuning tuning_;  // before across_, which reads its knobs
  // Once the job spans nodes; it outlives across_ and p2p_, which use it.
  std::unique_ptr<JobWorld> world_;
  gpu::GpuExecutor gpu_;  // the job's part of the GPU path, on its own lane
  observe::Timeline timeline_;
  observe::JobTimelines timelines_;  // the daemon's and timeline_
  Completion completion_;
  AcrossNodes across_;
  Intake intake_;
  std::optional<PointToPoint> p2p_;                        // reset first at teardown
  std::unique_ptr<negotiation::Coordinator> coordinator_;  // once formed
  std::deque<exec::FusedBatch> deferred_;                  // ready, waiting for result space
  negotiation::StallInspector stalls_;
  Clock::time_point next_stall_check_;
  bool reported_partial_ = false;  // node 0 holds a non-empty partial report
  // Until then, the negotiation moved: look for the next message often.
  Clock::time_point fast_poll_until_{};
  bool done_ = false;
};

}  // namespace collective::daemon::engine
