// The engine: one thread that owns every piece of job state — the job and its
// clients, the coordinator's tensor table, the result arena — and drives the
// executor. Work reaches it two ways: gRPC handlers post events
// (engine_events.h), and clients publish submissions in their segments'
// submission rings; either wakes it through its doorbell. It handles them in
// arrival order, runs whatever became ready, completes requests through the
// clients' completion rings, and keeps its timers (job formation, attach
// and waiting-registration deadlines, heartbeats). No lock guards job state,
// because no other thread touches it.
//
// The implementation is split by concern: engine.cc (loop, timers, status,
// timeline), engine_jobs.cc (registration, formation, leaving, failure,
// teardown), engine_requests.cc (the submission rings, completion records,
// releases), engine_collectives.cc (ready tensors, control collectives,
// fusion, local execution, and CompleteBatch: the one way a batch completes,
// whatever ran it), engine_world.cc (the world of daemons: formation across
// nodes, looking for the other daemons' messages, completing cross-node
// batches, failures of other nodes), engine_messages.cc (point-to-point
// sends and receives, matched in negotiation/message_matcher.h) and
// engine_gpu.cc (CUDA registrations,
// batches of CUDA tensors, the GPU's completions and health). The job's
// cross-node state is one object, AcrossNodes (across_nodes.h: negotiation
// with node 0 and the decided batches, through the seams of
// negotiation/control_link.h and exec/node_transport.h), which the loop
// drives and status and metrics read through its view. ready_check.h is the
// one check of a ready tensor, here and on node 0 across nodes.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "collective/v1/status.pb.h"
#include "config/daemon_config.h"
#include "daemon/engine/across_nodes.h"
#include "daemon/engine/engine_doorbell.h"
#include "daemon/engine/engine_events.h"
#include "daemon/engine/engine_spin.h"
#include "daemon/exec/cross_node_run.h"
#include "daemon/exec/executor.h"
#include "daemon/exec/fusion.h"
#include "daemon/exec/ops/collective_op.h"
#include "daemon/exec/thread_pool.h"
#include "daemon/gpu/device_backend_factory.h"
#include "daemon/gpu/gpu_executor.h"
#include "daemon/job/job.h"
#include "daemon/negotiation/coordinator.h"
#include "daemon/negotiation/message_matcher.h"
#include "daemon/negotiation/remote_messages.h"
#include "daemon/negotiation/stall_inspector.h"
#include "daemon/observe/metrics.h"
#include "daemon/observe/systemd_notify.h"
#include "daemon/observe/timeline.h"
#include "daemon/tune/parameter_manager.h"
#include "daemon/tune/tuned_values.h"
#include "daemon/world/mpi_transport.h"
#include "daemon/world/node_exchange.h"
#include "daemon/world/world.h"
#include "shm/segment_names.h"

namespace collective::daemon::engine {

class Engine {
 public:
  // Asks the daemon to stop (with why, and the process's exit code): the
  // engine's way out when its MPI world of daemons broke.
  using StopRequest = std::function<void(std::string reason, int exit_code)>;

  // `metrics_url`: where the metrics are served over HTTP, if they are.
  // `devices` is the GPU path's backend (null: no CUDA tensors); tests pass
  // a fake.
  Engine(const config::DaemonConfig& config, uint64_t epoch, std::string metrics_url = {},
         StopRequest stop = nullptr,
         std::unique_ptr<gpu::DeviceBackend> devices = gpu::CreateDeviceBackend());
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts the engine thread (and the timeline, if the configuration names
  // a file).
  absl::Status Start();

  // Thread-safe. False once the engine has stopped: the caller answers its
  // RPC itself then.
  bool Post(EngineEvent event);
  // Thread-safe. What a caller whose Post was refused answers:
  // UNAVAILABLE "collectived is shutting down (<reason>)", the reason the
  // pending requests were failed with.
  absl::Status Refusal() const;

  // Fails all pending work with an error naming `reason`, ends every
  // session and registration, removes the job's segments, and stops the
  // engine thread. Returns when the thread has exited.
  void Shutdown(const std::string& reason, bool world_lost = false);

 private:
  // engine.cc
  void Loop();
  std::vector<shm::ClientSegmentHeader*> AttachedClients() const;
  void Dispatch(EngineEvent& event);
  void RunTimers(Clock::time_point now);
  Clock::time_point NextTimer() const;
  void WriteHeartbeats();
  void OnStatus(const StatusEvent& event) const;
  void OnMetrics(const MetricsEvent& event) const;
  void OnTimeline(const TimelineEvent& event);
  // Tells every client whether to report copy-out spans.
  void PublishTimelineState();
  void CheckStalls(Clock::time_point now);
  // Across nodes, on nodes but 0: tensors partly submitted here for a while,
  // so that node 0's stall report names exactly the missing ranks.
  void ReportPartialToNodeZero(Clock::time_point now);
  // Tensors some ranks wait on, this node's merged with node 0's view
  // across nodes; `with_announced`: also those ready here and waiting for
  // node 0 (for status, not for the stall inspector).
  std::vector<negotiation::WaitingTensor> AllWaiting(bool with_announced) const;
  void DescribePending(Clock::time_point now, v1::StatusResponse& response) const;
  void OnShutdown(const ShutdownEvent& event);

  // engine_jobs.cc
  void OnRegister(const RegisterEvent& event);
  // A registration, new or one that waited for an ended job to go; the job
  // it forms must have formed by `deadline`.
  void Register(std::shared_ptr<job::RegisterCall> call, Clock::time_point deadline);
  // What any registration must satisfy, whatever the daemon's job.
  absl::Status CheckRequest(const v1::RegisterRequest& request, const std::string& job_id) const;
  // Whether it fits the job that is forming or running, if any.
  absl::Status CheckAgainstJob(const v1::RegisterRequest& request, const std::string& job_id,
                               const std::vector<std::vector<int32_t>>& static_sets) const;
  // Registrations that waited for an ended job until their deadline fail,
  // naming who has not left it.
  void ExpireWaitingRegistrations(Clock::time_point now);
  absl::StatusOr<std::unique_ptr<job::ClientRecord>> NewClient(const job::RegisterCall& call);
  // Every local rank registered: form the job here (one node) or start the
  // exchange with the other nodes.
  void FormJob();
  // The layout is known: create the result segment, assign topologies and
  // answer the registrations.
  void FinishFormation(const job::NodeLayout& layout);
  void AbortFormation(const absl::Status& status);
  void OnRegisterCancelled(const RegisterCancelledEvent& event);
  void OnAttach(const std::shared_ptr<job::SessionLink>& link, const job::PeerCredentials& peer,
                const v1::Attach& attach);
  void OnLeave(job::ClientRecord& client);
  void OnSessionClosed(const SessionClosedEvent& event);
  // The job cannot continue: every pending request fails with `why`, every
  // attached client hears it, and later submissions fail with it too. Across
  // nodes the other nodes hear it as well, unless it came from them.
  enum class Origin { kHere, kOtherNode };
  void FailJob(const absl::Status& why, Origin origin = Origin::kHere);
  void EndJob(const absl::Status& why, Origin origin = Origin::kHere);
  // Fails what is not decided across nodes (or anything, on one node): the
  // tensors not ready here, and (node 0) those it waits for.
  void FailUndecided(const absl::Status& why);
  // Fails what node 0 decided but this node has not finished, leaving its
  // transfers to MPI: only when MPI is abandoned.
  void AbandonDecided(const absl::Status& why);
  void MaybeTearDownJob();

  // engine_requests.cc
  // A session stream's message: attach or leave.
  void OnClientMessage(ClientMessageEvent& event);
  // Submissions, releases and CUDA registrations, from the submission ring.
  void OnSubmissions(job::ClientRecord& client, v1::ClientMessage& message);
  // A client that broke the protocol is gone, and so is its job: says `why`
  // to every rank and ends its session with it.
  void DropClient(job::ClientRecord& client, const absl::Status& why);
  // Reads every attached client's submission ring; true if anything came.
  bool DrainSubmissionRings();
  bool DrainSubmissionRing(job::ClientRecord& client);
  void OnSubmit(job::ClientRecord& client, v1::TensorRequest& request);
  void OnCopyOuts(job::ClientRecord& client, const v1::ClientMessage& message);
  // A finished request: its record, and the result it holds until released
  // (none when `block` is kNoBlock: a CUDA tensor's result is in its output).
  static constexpr uint64_t kNoBlock = ~uint64_t{0};
  void Complete(job::ClientRecord& client, const v1::TensorRequest& request, uint64_t block,
                uint64_t slot, const exec::ops::RankResult& result, const std::string& tensor,
                uint32_t flags = 0);
  void CompleteWithError(job::ClientRecord& client, uint64_t request_id,
                         const absl::Status& status);
  void FailSubmissions(std::vector<negotiation::PendingTensor> tensors, const absl::Status& why);
  // What a set refuses once a rank of it joined, each with its own error.
  void FailRefused(std::vector<std::pair<negotiation::PendingTensor, absl::Status>> refused);
  void FailReady(std::vector<negotiation::ReadyTensor> tensors, const absl::Status& why);

  // engine_messages.cc: point-to-point sends and receives.
  // A validated send or receive of `set`'s member `client`: it waits in
  // messages_ for its other half, or fails at once (a peer outside the set
  // or on another node).
  void OnMessage(job::ClientRecord& client, v1::TensorRequest& request, const job::ProcessSet& set);
  void FailMessages(std::vector<negotiation::Submission> halves, const absl::Status& why);
  void DescribeMessages(Clock::time_point now, v1::StatusResponse& response) const;
  // This node's sends and receives that wait for their other half, local
  // and across nodes, oldest first.
  std::vector<negotiation::WaitingMessage> AllWaitingMessages() const;
  // Across nodes: the rendezvous with the other nodes' halves, the
  // messages waiting for result space, and the bytes in flight; true if
  // anything moved. An error: the daemons lost each other.
  absl::StatusOr<bool> PollMessages();
  // A local send met its receive on another node: its bytes go.
  void StartRemoteSend(negotiation::RemoteMessages::MatchedSend send);
  // A local receive's answer came; false while it waits for result space.
  bool StartRemoteReceive(negotiation::RemoteMessages::AnsweredReceive& receive);
  // Takes the bytes that follow an answer to a receive that failed or went
  // (into a buffer of the daemon's), so that the sender's daemon finishes.
  void DrainRemoteReceive(const negotiation::RemoteMessages::AnsweredReceive& receive);
  // A message across nodes whose bytes moved (`status`: how) completes.
  struct MessageRun;
  void FinishMessage(MessageRun run, const absl::Status& status);
  // MPI is abandoned: the messages in flight fail with `why`.
  void AbandonMessages(const absl::Status& why);

  // engine_world.cc
  // Joins the launcher's MPI world (on the engine thread, the only one that
  // calls MPI) or makes a world of one.
  absl::Status StartWorld();
  // Starts forming the job with the other nodes.
  void StartExchange();
  // Advances what waits for the other daemons; true if anything happened.
  bool PollWorld();
  // Whether the engine must look for the other daemons' messages soon, and
  // when next.
  bool WaitsForWorld() const;
  Clock::time_point NextWorldPoll() const;
  // The negotiation moved: look for the other daemons' next message often
  // for a while (two cycles).
  void KeepPollingFast();
  // Whether the engine, finding nothing to do, looks again at once rather
  // than sleeping (see engine_spin.h): it just ran every request of the
  // job's ranks, or made progress while another daemon owes it a decision,
  // a transfer's other half or a message's.
  bool Spins(Clock::time_point now) const;
  // The nodes agreed on the job: its communicators, then the job itself.
  void FormAcrossNodes(const job::NodeLayout& layout);
  // An exchange that cannot complete any more: kept for MPI, and the world
  // cannot form later jobs.
  void AbandonExchange(const absl::Status& why);
  // A cross-node batch ended (`status`: its transfers' outcome): it
  // completes like any other.
  void FinishCrossNode(exec::FusedBatch batch, exec::Executor::Outcome outcome,
                       std::unique_ptr<exec::CrossNodeRun> cross, absl::Status status);
  // Another node's word on the job, or its silence.
  void OnJobEvent(int from, const v1::JobEvent& event);
  // Tells the other nodes that the job failed or ended here.
  void TellOtherNodes(v1::JobEvent::Kind kind, const absl::Status& why);
  // The world of daemons cannot form another job (a node died or stopped,
  // MPI failed, transfers were left unfinished): refuse new jobs, and stop
  // the daemon once this job is gone. `abandon_mpi`: MPI cannot be trusted
  // any more (skip its clean-up, which could hang on a dead node).
  void BreakWorld(const absl::Status& why, bool abandon_mpi);
  // Asks the daemon to stop because the world broke (once).
  void RequestStop();
  // The job's cross-node state, at teardown.
  void EndWorldJob();
  // What AcrossNodes asks of the engine (engine_world.cc).
  class CrossNodeHost final : public AcrossNodes::Host {
   public:
    explicit CrossNodeHost(Engine& engine) : engine_(engine) {}
    job::Job* job() override;
    void RefuseAfterJoin(int32_t process_set_id, int32_t first_joined) override;
    void FailTensor(const negotiation::ReadyTensor& tensor, const absl::Status& why) override;
    void Negotiated(const negotiation::ReadyTensor& tensor) override;
    void RunControl(const negotiation::ReadyTensor& tensor) override;
    void RunOnDevice(std::vector<exec::FusedBatch> batches) override;
    void Finished(exec::FusedBatch batch, exec::Executor::Outcome outcome,
                  std::unique_ptr<exec::CrossNodeRun> run, absl::Status status) override;
    void BreakAndFail(const absl::Status& why) override;
    void MaybeTearDown() override;
    void Tuned(const v1::Tuning& tuning) override;

   private:
    Engine& engine_;
  };

  // engine_collectives.cc
  // Runs what is ready; true if anything ran.
  bool RunReady();
  // Runs the fused batches waiting for result space, in order.
  bool RunDeferred();
  // Barrier, join, process-set changes: no data, answered at once.
  void RunControl(const negotiation::ReadyTensor& tensor);
  void CompleteControl(const negotiation::ReadyTensor& tensor, int64_t value);
  void FailTensor(const negotiation::ReadyTensor& tensor, const absl::Status& status);
  // How a batch of data collectives ran, whatever ran it.
  struct BatchRun {
    enum class Where { kHost, kAcrossNodes, kDevice };
    Where where = Where::kHost;
    // OK or the error every rank of every tensor receives; on the host and
    // across nodes the result block and slots; when the work ran (on the
    // GPU: when it was queued).
    exec::Executor::Outcome outcome;
    // The failure leaves the job unable to go on.
    bool breaks_job = false;
    // Across nodes: the bytes this node sent and received, and when the
    // transfers ended (outcome.finished is when they started).
    uint64_t transferred = 0;
    Clock::time_point transferred_at{};
    // On the GPU: the batch's id (its timeline rows end with it), and the
    // block of alltoall's received splits (kNoBlock if none).
    uint64_t device_batch = 0;
    uint64_t splits_block = kNoBlock;
  };
  // The one way a batch completes: every rank's record or error, the
  // totals, the metrics and the timeline.
  void CompleteBatch(const exec::FusedBatch& batch, const BatchRun& run);
  // The records of a CUDA tensor's ranks (each result is in the rank's
  // output; alltoall's received splits are written at `splits_at`, in
  // `block`, which advances).
  void CompleteOnDevice(const negotiation::ReadyTensor& tensor, const std::string& name,
                        uint64_t block, uint64_t& splits_at);
  // The negotiation of a tensor, from its first submission here to ready.
  void RecordNegotiation(const negotiation::ReadyTensor& tensor);
  void ReleaseResult(job::ClientRecord& client, uint64_t request_id);
  void ReleaseAllResults(job::ClientRecord& client);
  // CLOCK_MONOTONIC nanoseconds of a steady_clock time (the same clock).
  static uint64_t Nanos(Clock::time_point time);
  // The row a tensor gets in the timeline: names are per process set.
  static std::string TimelineName(const negotiation::ReadyTensor& tensor);

  // engine_tuning.cc: autotuning (daemon/tune).
  // A job formed: the knobs start at the configuration's values, and the
  // tuner (on one node, or on node 0) starts measuring.
  void StartTuning();
  // A batch completed, having reduced `bytes`: the tuner's measurement. Its
  // next values are in force at once on one node, and across nodes from
  // node 0's next batch of decisions.
  void MeasureForTuning(const exec::FusedBatch& batch, uint64_t bytes);
  // Node 0's values, arrived with its decisions (on node 0 too).
  void OnTuned(const v1::Tuning& tuning);
  void DescribeTuning(v1::StatusResponse& response) const;

  // engine_gpu.cc
  void OnRegisterCuda(job::ClientRecord& client, const v1::RegisterCuda& message);
  // Runs the batch of CUDA tensors at the front of deferred_; false when it
  // waits for result space (alltoall's received splits).
  bool RunDeviceBatch();
  void OnGpuDone(const GpuDoneEvent& event);
  // Fails the job when its GPU work cannot go on (an NCCL error, a timeout).
  void CheckGpu(Clock::time_point now);
  // The client is gone: its CUDA registrations go with it.
  void ForgetDevices(const job::ClientRecord& client);

  const config::DaemonConfig config_;
  const uint64_t epoch_;
  const uid_t daemon_uid_;
  const gid_t daemon_gid_;
  const Clock::time_point started_;
  shm::SegmentNames names_;
  exec::ThreadPool pool_;
  exec::Executor executor_;
  // The knobs autotuning moves, as in force (before across_, which reads
  // them); the tuner, while a job runs on one node or on node 0 with
  // autotune on; and where tuning stands, as status shows it.
  tune::TunedValues knobs_;
  std::unique_ptr<tune::ParameterManager> tuner_;
  v1::Tuning tuning_;

  // The MPI world of daemons (engine thread only, like all of MPI).
  const StopRequest stop_;
  std::unique_ptr<world::World> world_;
  world::MpiTransport transport_;                  // transfers of collectives across nodes
  uint64_t world_generation_ = 0;                  // jobs formed across nodes
  std::unique_ptr<world::NodeExchange> exchange_;  // formation across nodes
  std::vector<std::unique_ptr<world::NodeExchange>> abandoned_;  // MPI may still write them
  absl::Status world_broken_;                                    // why no job can form any more
  bool stop_requested_ = false;
  int world_exit_code_ = 0;  // 3 when MPI had to be abandoned
  // A job across nodes: its communicators, negotiation, announced tensors
  // and decided batches.
  CrossNodeHost across_host_{*this};
  AcrossNodes across_;
  bool reported_partial_ = false;  // node 0 holds a non-empty partial report
  // Until then, the negotiation moved: look for the next message often.
  Clock::time_point fast_poll_until_{};
  // When to look for another daemon's stop notice next (engine_world.cc).
  Clock::time_point next_stop_look_{};
  EngineSpin spin_{std::chrono::microseconds(config_.engine_spin_us)};

  // Job state: engine thread only.
  std::unique_ptr<job::Job> job_;
  std::unique_ptr<negotiation::Coordinator> coordinator_;
  // Sends and receives waiting for their other half (alive with coordinator_).
  std::unique_ptr<negotiation::MessageMatcher> messages_;
  // Across nodes (engine_messages.cc): the rendezvous of messages whose two
  // ranks live on different nodes (alive while the job runs across nodes),
  // the answered receives waiting for result space, and the messages whose
  // bytes are moving.
  std::unique_ptr<negotiation::RemoteMessages> remote_messages_;
  std::deque<negotiation::RemoteMessages::AnsweredReceive> receives_waiting_space_;
  struct MessageRun {
    exec::FusedBatch batch;  // one tensor: the local half
    exec::Executor::Outcome outcome;
    exec::Pending transfer;
    uint64_t bytes = 0;
    // Bytes taken only to be dropped (DrainRemoteReceive): no half completes;
    // the set's span keeps its communicator open meanwhile.
    std::unique_ptr<std::vector<std::byte>> drain;
    std::shared_ptr<const job::SetSpan> drain_span;
  };
  std::deque<MessageRun> message_runs_;
  // The spans (and so the communicators) of removed sets whose receives,
  // failed with the set, may still be answered with bytes: by receive id,
  // until the bytes are taken or the job ends.
  absl::flat_hash_map<uint64_t, std::shared_ptr<const job::SetSpan>> retired_receive_spans_;
  std::deque<exec::FusedBatch> deferred_;  // ready, waiting for result space
  // While a timeline records: batches of CUDA tensors on the GPU, by batch
  // id, with their rows and bytes.
  absl::flat_hash_map<uint64_t, std::vector<std::pair<std::string, uint64_t>>> gpu_rows_;
  absl::flat_hash_map<uint64_t, uint64_t> registrations_;  // call id -> client id
  uint64_t next_client_id_ = 1;
  uint64_t next_job_sequence_ = 1;
  Clock::time_point next_heartbeat_;
  Clock::time_point next_stall_check_;
  negotiation::StallInspector stalls_;
  observe::Timeline timeline_;
  bool shutting_down_ = false;
  std::string shutdown_reason_;
  v1::Totals totals_;
  observe::Metrics metrics_;
  observe::JobStatusNotifier systemd_status_;

  // The event queue and the doorbell: the only state shared with other
  // threads.
  EngineDoorbell doorbell_{config_.engine_wait};
  mutable std::mutex mutex_;
  std::vector<EngineEvent> queue_;
  bool stopped_ = false;
  std::string stopped_because_;  // shutdown_reason_, once stopped_
  std::thread thread_;

  // The GPU path. Last, so that it goes first: its completion callbacks
  // post to the queue above until it is gone.
  gpu::GpuExecutor gpu_;
};

}  // namespace collective::daemon::engine
