// The state of a job across nodes, and its negotiation with node 0: the
// process sets' communicators, the negotiator, the tensors announced to node
// 0 awaiting its decision, and the batches it decided, run one at a time in
// decision order (this node's part from shared memory, then nonblocking MPI
// among the set's nodes, pipelined; a small cached allreduce instead sends
// its part with its announcement, to node 0 and to the set's other nodes,
// and takes the combination from the other nodes' parts or from node 0's
// decision, whichever comes first). Its job run (job_run.h) calls
// Announce, Poll, Advance and Fail, and is the AcrossNodes::Host that
// AcrossNodes calls back for what the run owns (completing and failing
// requests, breaking the world, the job's end). Status and metrics read it
// through View. Engine thread only, like all of MPI. Each run owns one:
// Begin when its job forms across nodes, End at the run's teardown, which
// the engine does between turns, so that a callback that ends the job never
// destroys the object running it.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/v1/status.pb.h"
#include "config/daemon_config.h"
#include "daemon/engine/job_world.h"
#include "daemon/exec/cross_node_run.h"
#include "daemon/exec/executor.h"
#include "daemon/exec/fusion.h"
#include "daemon/exec/set_groups.h"
#include "daemon/exec/thread_pool.h"
#include "daemon/job/job.h"
#include "daemon/negotiation/negotiator.h"
#include "daemon/tune/tuned_values.h"

namespace collective::daemon::engine {

class AcrossNodes {
 public:
  // What the engine does for the job across nodes, called back in the order
  // node 0's decisions and the transfers dictate.
  class Host {
   public:
    virtual ~Host() = default;
    // The job (the host outlives this object's use of it).
    virtual job::Job& job() = 0;
    // A set whose rank `first_joined` joined refuses what is pending.
    virtual void RefuseAfterJoin(int32_t process_set_id, int32_t first_joined) = 0;
    virtual void FailTensor(const negotiation::ReadyTensor& tensor, const absl::Status& why) = 0;
    // A tensor node 0 decided: its negotiation ended.
    virtual void Negotiated(const negotiation::ReadyTensor& tensor) = 0;
    virtual void RunControl(const negotiation::ReadyTensor& tensor) = 0;
    // Decided batches of CUDA tensors, for the GPU queue, in decision order.
    virtual void RunOnDevice(std::vector<exec::FusedBatch> batches) = 0;
    // A cross-node batch ended (`status`: its transfers' outcome).
    virtual void Finished(exec::FusedBatch batch, exec::Executor::Outcome outcome,
                          std::unique_ptr<exec::CrossNodeRun> run, absl::Status status) = 0;
    // The job cannot go on, nor MPI be trusted with this world.
    virtual void BreakAndFail(const absl::Status& why) = 0;
    // Work ended: the job may be finished.
    virtual void MaybeTearDown() = 0;
    // Node 0's autotuned values: in force from the decisions that carry
    // them on (`knobs`, below, must hold them before those are planned).
    virtual void Tuned(const v1::Tuning& tuning) = 0;
  };

  // What status and metrics read: nothing of it changes.
  class View {
   public:
    explicit View(const AcrossNodes& across) : across_(across) {}
    // A job runs across nodes.
    bool active() const { return across_.negotiator_ != nullptr; }
    // This node is node 0 (only while active).
    bool coordinator() const { return active() && across_.negotiator_->coordinator(); }
    // Announced or decided work has not finished here.
    bool unfinished() const;
    void AddTo(v1::Totals& totals) const;
    void Describe(v1::NegotiationStatus* out) const;
    // Node 0's view of the tensors some ranks wait on.
    std::vector<negotiation::WaitingTensor> Waiting(const job::ProcessSetTable& sets,
                                                    Clock::time_point now) const;
    // Those ready here and waiting for node 0's decision.
    std::vector<negotiation::WaitingTensor> Announced() const;

   private:
    const AcrossNodes& across_;
  };

  // `knobs`: the fusion threshold and chunk size in force (autotuning moves
  // them; the engine owns them).
  AcrossNodes(const config::DaemonConfig& config, const tune::TunedValues& knobs, Host& host,
              exec::Executor& executor, exec::ThreadPool& pool, std::function<void()> wake);

  View view() const { return View(*this); }

  // The nodes agreed on `layout`: the groups of the job's sets in `world`
  // (an MPI world's MPI_Comm_dup waits for every node) and the job's
  // negotiation on its control link. `world` outlives this object's use of
  // it (until End).
  absl::Status Begin(JobWorld& world, const job::NodeLayout& layout);
  // The job's cross-node state goes; its negotiation's totals join `totals`.
  // A world that abandoned MPI leaves what MPI may still own to the
  // process's exit.
  void End(v1::Totals& totals);

  // Ranks of `set` on this node.
  int32_t LocalMembers(const job::ProcessSet& set) const;
  bool SpansNodes(const job::ProcessSet& set) const;
  // How a set lies on the nodes, with its communicator (null if none), and
  // the control link of the job's negotiation (while active): what
  // point-to-point messages between nodes travel on.
  std::shared_ptr<const job::SetSpan> SpanOf(int32_t process_set_id) const;
  negotiation::ControlLink& link() { return negotiator_->link(); }
  // A communicator for a set the job gained or lost.
  absl::Status AddSet(const job::ProcessSet& set);
  void RemoveSet(int32_t process_set_id);

  // A tensor ready on this node whose set spans nodes goes to node 0 (true)
  // to wait for its decision.
  bool Announce(negotiation::ReadyTensor& tensor);
  // A local rank of a set that spans nodes joined: node 0 must know.
  void AnnounceJoin(const job::ProcessSet& set, int32_t set_rank);
  // Across nodes, on nodes but 0: tensors partly submitted here for a while.
  void ReportPartial(std::vector<v1::PartialTensor> partial);

  // What Poll heard: whether anything came, and the other nodes' word on
  // the job, for the engine.
  struct Heard {
    bool worked = false;
    std::vector<std::pair<int, v1::JobEvent>> events;
  };
  // Exchanges messages with the other nodes and carries out node 0's
  // decisions, in order. An error: the daemons lost each other.
  absl::StatusOr<Heard> Poll(Clock::time_point now);
  // The node that sent nothing for too long, or -1.
  int Silent(Clock::time_point now) const;
  Clock::duration node_timeout() const { return negotiator_->node_timeout(); }
  // Node 0, or a node waiting for node 0's decisions or running them: the
  // engine looks for the other daemons' messages every cycle.
  bool WaitsForDecisions() const;
  Clock::time_point next_heartbeat() const { return negotiator_->next_heartbeat(); }
  // Transfers run now: the engine looks for their end often.
  bool transferring() const;
  // Tensors announced here await node 0's decision, or transfers run: the
  // other daemons' next message is due within microseconds.
  bool AwaitsOtherNodes() const { return !announced_.empty() || transferring(); }
  // Announcements wait to be sent by the next Poll.
  bool unsent() const { return negotiator_ != nullptr && negotiator_->unsent(); }

  // Runs the decided batches, one at a time, in decision order; true if any
  // progressed.
  bool Advance();

  // The job failed or ended with `why`: node 0 fails what it still waits
  // for, now and when announced later.
  void Fail(const absl::Status& why);
  // Stalled on node 0: fails the tensor on every node; false if unknown.
  bool FailStalled(int32_t process_set_id, const std::string& name, const absl::Status& why);
  // MPI is abandoned: nothing announced or decided can finish. Returns
  // those tensors; MPI keeps the running batch's buffers and requests.
  std::vector<negotiation::ReadyTensor> Abandon();
  // Tells the other nodes of the job's failure or end.
  absl::Status Tell(const v1::JobEvent& event);
  // Node 0: autotuned values for every node, with the next decisions.
  void Tune(v1::Tuning tuning);

  // "node 1 (host-b, ranks 2-3)".
  static std::string DescribeNode(const job::Job* job, int node);
  // Whether a job in `state` carries out node 0's decisions: once formed,
  // also when it ends or fails (decided work still runs everywhere; see
  // Engine::FailJob).
  static bool Decides(job::JobState state) { return state != job::JobState::kForming; }

 private:
  // Carries out one batch of node 0's decisions, in order.
  void Decide(v1::Decisions decisions);
  // The tensor a decision names, as this node runs it: its announced local
  // part, or (every local member having joined) one with no submissions.
  std::optional<negotiation::ReadyTensor> DecidedTensor(
      const v1::Decision& decision, bool& from_cache,
      const negotiation::ResponseCache::Entry*& cached);

  const config::DaemonConfig& config_;
  const tune::TunedValues& knobs_;
  Host& host_;
  exec::Executor& executor_;
  exec::ThreadPool& pool_;
  const std::function<void()> wake_;  // a transfer ended

  JobWorld* world_ = nullptr;
  std::unique_ptr<exec::SetGroups> set_groups_;
  std::unique_ptr<negotiation::Negotiator> negotiator_;
  // By process set and name.
  std::map<std::pair<int32_t, std::string>, negotiation::ReadyTensor> announced_;
  std::deque<exec::FusedBatch> queue_;
  struct Active {
    exec::FusedBatch batch;
    exec::Executor::Outcome outcome;
    std::unique_ptr<exec::CrossNodeRun> run;
  };
  std::optional<Active> active_;
};

}  // namespace collective::daemon::engine
