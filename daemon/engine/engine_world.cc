// The engine's part in the MPI world of daemons: joining it, forming a job
// across nodes without blocking the engine, looking for the other daemons'
// messages, completing what AcrossNodes ran (across_nodes.h owns the job's
// cross-node state), and learning of the other nodes' failures and deaths.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/engine/engine.h"
#include "daemon/negotiation/mismatch.h"

namespace collective::daemon::engine {
namespace {

// While transfers run, and for a short window after the negotiation moved
// (an announcement made or received, a decision taken), the next message
// usually follows within microseconds: look this often once the engine
// stopped looking at once (engine_spin.h), and sleep a whole cycle only when
// the window has passed. Sleeps, not spins: the trainers and daemons of a
// node often outnumber its cores.
constexpr auto kFastPoll = std::chrono::microseconds(50);
// A daemon that stops is heard within this, not on every look: each look for
// its notice is a call into MPI (a poll of the TCP sockets), and while a
// small allreduce runs across nodes the engine looks every few microseconds.
constexpr auto kStopNoticeLook = std::chrono::milliseconds(1);

}  // namespace

absl::Status Engine::StartWorld() {
  const world::WorldMode mode = config_.multi_node == config::MultiNode::kOff
                                    ? world::WorldMode::kSingle
                                    : world::WorldMode::kAuto;
  auto world = world::World::Create(mode);
  if (!world.ok()) return world.status();
  world_ = std::move(*world);
  return absl::OkStatus();
}

void Engine::StartExchange() {
  auto exchange = world::NodeExchange::Start(
      *world_, {.local_size = job_->local_size(),
                .job_id = job_->id(),
                .settings = {.fusion_threshold_bytes = config_.fusion_threshold_bytes,
                             .cross_node_chunk_bytes = config_.cross_node_chunk_bytes,
                             .response_cache_capacity = config_.response_cache_capacity,
                             .autotune = static_cast<uint8_t>(config_.autotune ? 1 : 0)}});
  if (!exchange.ok()) {
    BreakWorld(exchange.status(), /*abandon_mpi=*/true);
    AbortFormation(exchange.status());
    return;
  }
  exchange_ = std::move(*exchange);
  ++world_generation_;
  log::Coord().info("job '{}': all {} local ranks registered; waiting for the other {} nodes",
                    job_->id(), job_->local_size(), world_->size() - 1);
}

// A daemon of several looks for the others' messages even without a job:
// a node that stops says so, and this one stops too.
bool Engine::WaitsForWorld() const { return !world_->single() && !world_->abandoned(); }

Clock::time_point Engine::NextWorldPoll() const {
  const Clock::time_point now = Clock::now();
  if (across_.transferring() || !message_runs_.empty() || now < fast_poll_until_) {
    return now + kFastPoll;
  }
  const Clock::time_point cycle = now + std::chrono::milliseconds(knobs_.cycle_time_ms);
  const Clock::time_point idle = now + std::chrono::milliseconds(config_.heartbeat_interval_ms);
  if (exchange_ != nullptr) return cycle;
  if (!across_.view().active()) return idle;
  // Node 0 hears from the others at any time; a node waiting for a
  // decision (or whose local ranks joined, so that node 0 may decide
  // tensors it never announced) looks every cycle; an idle one only for
  // its heartbeat and for news of failures.
  if (across_.WaitsForDecisions() || !coordinator_->Joined(0).empty() ||
      (remote_messages_ != nullptr && !remote_messages_->idle())) {
    return cycle;
  }
  return std::min(idle, across_.next_heartbeat());
}

void Engine::KeepPollingFast() {
  fast_poll_until_ = Clock::now() + 2 * std::chrono::milliseconds(knobs_.cycle_time_ms);
}

void Engine::FormAcrossNodes(const job::NodeLayout& layout) {
  // Every node reaches this point with the same layout: communicators first
  // (MPI_Comm_dup waits for every node), then the job, whose static
  // process sets get communicators too.
  if (absl::Status begun = across_.Begin(*world_, world_generation_, layout); !begun.ok()) {
    BreakWorld(begun, /*abandon_mpi=*/true);
    AbortFormation(begun);
    return;
  }
  remote_messages_ = std::make_unique<negotiation::RemoteMessages>(across_.link(), layout);
  FinishFormation(layout);
  if (job_ == nullptr || job_->state() != job::JobState::kRunning) {
    // This node could not form what the others did: they must hear it.
    const absl::Status why = absl::UnavailableError(absl::StrCat(
        "node ", world_->rank(), " (", world_->node_name(), ") could not form the job"));
    TellOtherNodes(v1::JobEvent::KIND_FAILED, why);
    EndWorldJob();
    return;
  }
  for (const auto& [id, set] : job_->process_sets().sets()) {
    if (absl::Status added = across_.AddSet(set); !added.ok()) {
      FailJob(absl::UnavailableError(absl::StrCat("process set ", id, " of job '", job_->id(),
                                                  "' across nodes: ", added.message())));
      return;
    }
  }
}

bool Engine::PollWorld() {
  // An abandoned world gets no more MPI calls: they could progress
  // transfers into memory the job no longer maps.
  if (world_->single() || world_->abandoned()) return false;
  const Clock::time_point now = Clock::now();
  if (now >= next_stop_look_) {
    next_stop_look_ = now + kStopNoticeLook;
    if (const int stopping = world_->TakeStopNotice(); stopping >= 0) {
      BreakWorld(
          absl::UnavailableError(absl::StrCat("the daemon of node ", stopping, " is stopping")),
          /*abandon_mpi=*/false);
    }
  }
  if (exchange_ != nullptr) {
    std::optional<absl::StatusOr<job::NodeLayout>> layout = exchange_->Poll();
    if (!layout.has_value()) return false;
    exchange_.reset();
    if (job_ == nullptr || job_->state() != job::JobState::kForming) {
      // The job went away while the others formed it: they must hear it.
      BreakWorld(absl::UnavailableError("a job formed across nodes without this node's ranks"),
                 /*abandon_mpi=*/false);
      return true;
    }
    if (!layout->ok()) {
      AbortFormation(layout->status());
      return true;
    }
    if ((*layout)->nodes() == 1) {
      FinishFormation(**layout);
    } else {
      FormAcrossNodes(**layout);
    }
    return true;
  }
  if (!across_.view().active() || job_ == nullptr) return false;
  absl::StatusOr<AcrossNodes::Heard> heard = across_.Poll(now);
  if (!heard.ok()) {
    const absl::Status why = absl::UnavailableError(absl::StrCat(
        "the daemons of job '", job_->id(), "' lost each other: ", heard.status().message()));
    BreakWorld(why, /*abandon_mpi=*/true);
    FailJob(why);
    return true;
  }
  bool worked = heard->worked;
  if (absl::StatusOr<bool> moved = PollMessages(); !moved.ok()) {
    const absl::Status why = absl::UnavailableError(absl::StrCat(
        "the daemons of job '", job_->id(), "' lost each other: ", moved.status().message()));
    BreakWorld(why, /*abandon_mpi=*/true);
    FailJob(why);
    return true;
  } else {
    worked = worked || *moved;
  }
  if (job_ == nullptr) return true;
  if (worked) KeepPollingFast();
  for (const auto& [from, event] : heard->events) {
    if (job_ == nullptr) break;
    OnJobEvent(from, event);
  }
  if (worked) MaybeTearDownJob();
  if (across_.view().active() && job_ != nullptr && AcrossNodes::Decides(job_->state())) {
    if (const int silent = across_.Silent(now); silent >= 0) {
      const absl::Status why = absl::UnavailableError(
          absl::StrCat(AcrossNodes::DescribeNode(job_.get(), silent), " of job '", job_->id(),
                       "' stopped answering: its daemon sent "
                       "nothing for ",
                       std::chrono::duration<double>(across_.node_timeout()).count(),
                       " s (node_timeout_seconds); it died, hangs, or the network to it failed"));
      log::Mpi().error("{}", why.message());
      BreakWorld(why, /*abandon_mpi=*/true);
      FailJob(why);
      worked = true;
    }
  }
  return worked;
}

void Engine::FinishCrossNode(exec::FusedBatch batch, exec::Executor::Outcome outcome,
                             std::unique_ptr<exec::CrossNodeRun> cross, absl::Status status) {
  BatchRun run{.where = BatchRun::Where::kAcrossNodes, .outcome = std::move(outcome)};
  exec::Executor::Outcome& ran = run.outcome;
  // The timeline shows the local part up to the first transfer, then the
  // transfers (CROSS_NODE) to the end.
  run.transferred_at = Clock::now();
  run.transferred = cross->bytes();
  ran.started = cross->started();
  ran.finished = cross->transfers_started() == Clock::time_point{} ? run.transferred_at
                                                                   : cross->transfers_started();
  if (!status.ok()) {
    const absl::Status why = absl::UnavailableError(absl::StrCat(
        "job '", job_->id(), "' could not exchange data across nodes: ", status.message()));
    log::Mpi().error("{}", why.message());
    // The run's transfers may be half done on other nodes: MPI cannot be
    // trusted with this world any more, and the result block stays MPI's.
    BreakWorld(why, /*abandon_mpi=*/true);
    (void)cross.release();
    ran.status = why;
    run.breaks_job = true;
    CompleteBatch(batch, run);
    return;
  }
  executor_.CheckFaults(batch, *job_->results(), ran);
  size_t readers = 0;
  for (const negotiation::ReadyTensor& tensor : batch.tensors) readers += tensor.submissions.size();
  if (ran.status.ok() && readers == 0) job_->results()->Release(ran.block);
  run.breaks_job = !ran.corrupted.empty() || ran.results_lost;
  CompleteBatch(batch, run);
}

void Engine::OnJobEvent(int from, const v1::JobEvent& event) {
  const absl::Status why(
      static_cast<absl::StatusCode>(event.code()),
      absl::StrCat("on ", AcrossNodes::DescribeNode(job_.get(), from), ": ", event.message()));
  if (event.daemon_stopping() || event.node_lost()) {
    // A daemon that stops will not finish the work it was deciding with us.
    BreakWorld(why, /*abandon_mpi=*/event.node_lost() || across_.view().unfinished());
  }
  if (job_->state() == job::JobState::kForming) return;
  if (event.kind() == v1::JobEvent::KIND_ENDED) {
    EndJob(why, Origin::kOtherNode);
  } else {
    FailJob(why, Origin::kOtherNode);
  }
}

void Engine::TellOtherNodes(v1::JobEvent::Kind kind, const absl::Status& why) {
  if (!across_.view().active()) return;
  v1::JobEvent event;
  event.set_kind(kind);
  event.set_code(static_cast<int32_t>(why.code()));
  event.set_message(std::string(why.message()));
  event.set_daemon_stopping(shutting_down_);
  event.set_node_lost(!world_broken_.ok() && world_->abandoned());
  if (absl::Status told = across_.Tell(event); !told.ok()) {
    log::Mpi().warn("could not tell the other nodes: {}", told.message());
  }
}

void Engine::BreakWorld(const absl::Status& why, bool abandon_mpi) {
  if (world_->single()) return;
  if (abandon_mpi && !world_->abandoned()) {
    world_->Abandon();
    world_exit_code_ = 3;
    // Nothing decided can finish without MPI.
    if (job_ != nullptr) AbandonDecided(absl::UnavailableError(why.message()));
  }
  // A daemon that stops forms no other job.
  if (!world_broken_.ok() || shutting_down_) return;
  world_broken_ = absl::FailedPreconditionError(
      absl::StrCat("the MPI world of this job's daemons broke (", why.message(),
                   "); it cannot form another job: restart the daemons together (mpirun, srun)"));
  log::Mpi().warn("{}", world_broken_.message());
  if (job_ == nullptr) RequestStop();
}

void Engine::RequestStop() {
  if (stop_requested_ || stop_ == nullptr) return;
  stop_requested_ = true;
  stop_(std::string(world_broken_.message()), world_exit_code_);
}

void Engine::EndWorldJob() {
  // Messages still moving (MPI abandoned, or the daemon stops) are left to
  // MPI with their buffers, as across_ leaves an abandoned world's
  // transfers.
  for (MessageRun& run : message_runs_) {
    (void)run.transfer.release();
    (void)run.drain.release();
  }
  message_runs_.clear();
  receives_waiting_space_.clear();
  remote_messages_.reset();  // its link goes with the negotiation
  across_.End(totals_);
  if (!world_broken_.ok()) RequestStop();
}

void Engine::AbandonExchange(const absl::Status& why) {
  if (exchange_->in_flight()) {
    abandoned_.push_back(std::move(exchange_));
    world_broken_ = absl::FailedPreconditionError(
        absl::StrCat("this daemon's MPI world could not form an earlier job (", why.message(),
                     "); the daemons must be restarted together"));
  }
  exchange_.reset();
}

// What AcrossNodes asks of the engine.
job::Job* Engine::CrossNodeHost::job() { return engine_.job_.get(); }

void Engine::CrossNodeHost::RefuseAfterJoin(int32_t process_set_id, int32_t first_joined) {
  engine_.FailRefused(engine_.coordinator_->RefuseAfterJoin(process_set_id, first_joined));
}

void Engine::CrossNodeHost::FailTensor(const negotiation::ReadyTensor& tensor,
                                       const absl::Status& why) {
  engine_.FailTensor(tensor, why);
}

void Engine::CrossNodeHost::Negotiated(const negotiation::ReadyTensor& tensor) {
  engine_.RecordNegotiation(tensor);
}

void Engine::CrossNodeHost::RunControl(const negotiation::ReadyTensor& tensor) {
  engine_.RunControl(tensor);
}

void Engine::CrossNodeHost::RunOnDevice(std::vector<exec::FusedBatch> batches) {
  for (exec::FusedBatch& batch : batches) engine_.deferred_.push_back(std::move(batch));
  engine_.RunDeferred();
}

void Engine::CrossNodeHost::Finished(exec::FusedBatch batch, exec::Executor::Outcome outcome,
                                     std::unique_ptr<exec::CrossNodeRun> run, absl::Status status) {
  engine_.FinishCrossNode(std::move(batch), std::move(outcome), std::move(run), std::move(status));
}

void Engine::CrossNodeHost::BreakAndFail(const absl::Status& why) {
  engine_.BreakWorld(why, /*abandon_mpi=*/true);
  engine_.FailJob(why);
}

void Engine::CrossNodeHost::MaybeTearDown() { engine_.MaybeTearDownJob(); }

}  // namespace collective::daemon::engine
