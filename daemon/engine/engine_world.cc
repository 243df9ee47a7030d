// The engine's part in the MPI world of daemons: joining it, forming a job
// across nodes without blocking the engine, negotiating with node 0, running
// collectives whose process set spans nodes (this node's part from shared
// memory, then nonblocking MPI among the set's nodes, pipelined), and
// learning of the other nodes' failures and deaths.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/ready_check.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/negotiation/mismatch.h"
#include "daemon/world/control_channel.h"

namespace collective::daemon::engine {
namespace {

// Node 0's check, with every rank's request.
absl::Status CheckAcrossNodes(const negotiation::ReadyTensor& everyone) {
  return CheckReady(everyone, CheckScope::kAcrossNodes);
}

// Whether a job in `state` carries out node 0's decisions: once formed,
// also when it ends or fails (decided work still runs everywhere; see
// Engine::FailJob).
bool Decides(job::JobState state) { return state != job::JobState::kForming; }

template <typename Duration>
Clock::duration Ticks(Duration duration) {
  return std::chrono::duration_cast<Clock::duration>(duration);
}

// While transfers run, and for a short window after the negotiation moved
// (an announcement made or received, a decision taken), the next message
// usually follows within microseconds: look this often, and sleep a whole
// cycle only when the window has passed. Sleeps, not spins: the trainers
// and daemons of a node often outnumber its cores.
constexpr auto kFastPoll = std::chrono::microseconds(50);

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
                             .response_cache_capacity = config_.response_cache_capacity}});
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
  if ((cross_active_.has_value() && cross_active_->run->waiting_for_transfers()) ||
      now < fast_poll_until_) {
    return now + kFastPoll;
  }
  const Clock::time_point cycle = now + std::chrono::milliseconds(config_.cycle_time_ms);
  const Clock::time_point idle = now + std::chrono::milliseconds(config_.heartbeat_interval_ms);
  if (exchange_ != nullptr) return cycle;
  if (negotiator_ == nullptr) return idle;
  // Node 0 hears from the others at any time; a node waiting for a
  // decision (or whose local ranks joined, so that node 0 may decide
  // tensors it never announced) looks every cycle; an idle one only for
  // its heartbeat and for news of failures.
  if (negotiator_->coordinator() || !announced_.empty() || !coordinator_->Joined(0).empty() ||
      !cross_queue_.empty()) {
    return cycle;
  }
  return std::min(idle, negotiator_->next_heartbeat());
}

int32_t Engine::LocalMembers(const job::ProcessSet& set) const {
  const job::NodeLayout& layout = job_->layout();
  return static_cast<int32_t>(std::count_if(set.ranks.begin(), set.ranks.end(),
                                            [&](int32_t rank) { return layout.IsLocal(rank); }));
}

bool Engine::SpansNodes(const job::ProcessSet& set) const {
  return negotiator_ != nullptr && LocalMembers(set) < set.size();
}

void Engine::KeepPollingFast() {
  fast_poll_until_ = Clock::now() + 2 * std::chrono::milliseconds(config_.cycle_time_ms);
}

std::string Engine::DescribeNode(int node) const {
  if (job_ == nullptr || job_->state() == job::JobState::kForming ||
      node >= job_->layout().nodes()) {
    return absl::StrCat("node ", node);
  }
  const job::NodeLayout& layout = job_->layout();
  const int32_t first = layout.offset(node);
  const int32_t count = layout.local_sizes[node];
  const std::string host =
      static_cast<size_t>(node) < layout.hosts.size() ? layout.hosts[node] + ", " : "";
  return absl::StrCat("node ", node, " (", host, count == 1 ? "rank " : "ranks ", first,
                      count == 1 ? "" : absl::StrCat("-", first + count - 1), ")");
}

void Engine::FormAcrossNodes(const job::NodeLayout& layout) {
  // Every node reaches this point with the same layout: communicators first
  // (MPI_Comm_dup waits for every node), then the job, whose static
  // process sets get communicators too.
  auto comms = world::SetCommunicators::Create(*world_, layout);
  if (!comms.ok()) {
    BreakWorld(comms.status(), /*abandon_mpi=*/true);
    AbortFormation(comms.status());
    return;
  }
  set_comms_ = std::move(*comms);
  negotiator_ = std::make_unique<negotiation::Negotiator>(
      std::make_unique<world::ControlChannel>(*world_, world_generation_), layout,
      &CheckAcrossNodes,
      negotiation::Negotiator::Options{
          .cache_capacity = config_.response_cache_capacity,
          .heartbeat_interval = Ticks(std::chrono::milliseconds(config_.heartbeat_interval_ms)),
          .node_timeout = Ticks(std::chrono::duration<double>(config_.node_timeout_seconds))});
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
    if (absl::Status added = set_comms_->Add(set); !added.ok()) {
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
  if (const int stopping = world_->TakeStopNotice(); stopping >= 0) {
    BreakWorld(
        absl::UnavailableError(absl::StrCat("the daemon of node ", stopping, " is stopping")),
        /*abandon_mpi=*/false);
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
  if (negotiator_ == nullptr || job_ == nullptr) return false;
  const Clock::time_point now = Clock::now();
  auto incoming = negotiator_->Exchange(job_->process_sets(), now);
  if (!incoming.ok()) {
    const absl::Status why = absl::UnavailableError(absl::StrCat(
        "the daemons of job '", job_->id(), "' lost each other: ", incoming.status().message()));
    BreakWorld(why, /*abandon_mpi=*/true);
    FailJob(why);
    return true;
  }
  bool worked = !incoming->batches.empty() || !incoming->events.empty() || incoming->heard;
  if (worked) KeepPollingFast();
  for (v1::Decisions& batch : incoming->batches) {
    // An ending job still runs what node 0 decided (see EndJob).
    if (job_ == nullptr || !Decides(job_->state())) break;
    Decide(std::move(batch));
  }
  for (const auto& [from, event] : incoming->events) {
    if (job_ == nullptr) break;
    OnJobEvent(from, event);
  }
  if (worked) MaybeTearDownJob();
  if (negotiator_ != nullptr && job_ != nullptr && Decides(job_->state())) {
    if (const int silent = negotiator_->Silent(now); silent >= 0) {
      const absl::Status why = absl::UnavailableError(
          absl::StrCat(DescribeNode(silent), " of job '", job_->id(),
                       "' stopped answering: its daemon sent "
                       "nothing for ",
                       std::chrono::duration<double>(negotiator_->node_timeout()).count(),
                       " s (node_timeout_seconds); it died, hangs, or the network to it failed"));
      log::Mpi().error("{}", why.message());
      BreakWorld(why, /*abandon_mpi=*/true);
      FailJob(why);
      worked = true;
    }
  }
  return worked;
}

bool Engine::AnnounceIfAcrossNodes(negotiation::ReadyTensor& tensor) {
  if (negotiator_ == nullptr) return false;
  const job::ProcessSet* set = job_->process_sets().Find(tensor.process_set_id);
  if (set == nullptr || !SpansNodes(*set)) return false;
  tensor.across_nodes = true;
  tensor.local_members = LocalMembers(*set);
  negotiator_->Announce(tensor, *set, tensor.local_members);
  KeepPollingFast();
  announced_.emplace(std::pair(tensor.process_set_id, tensor.name), std::move(tensor));
  return true;
}

void Engine::AnnounceJoin(const job::ProcessSet& set, int32_t set_rank) {
  if (SpansNodes(set)) negotiator_->Joined(set.id, set_rank, set.ranks[set_rank]);
}

std::optional<negotiation::ReadyTensor> Engine::DecidedTensor(
    const v1::Decision& decision, bool& from_cache,
    const negotiation::ResponseCache::Entry*& cached) {
  from_cache = decision.from_cache();
  cached = from_cache ? negotiator_->CachedAt(decision.cache_bit()) : nullptr;
  if (from_cache && cached == nullptr) {
    log::Coord().error("node 0 decided cache bit {}, which holds no tensor here",
                       decision.cache_bit());
    return std::nullopt;
  }
  const int32_t set_id = from_cache ? cached->key.first : decision.process_set_id();
  const std::string& name = from_cache ? cached->key.second : decision.name();
  if (auto it = announced_.find({set_id, name}); it != announced_.end()) {
    negotiation::ReadyTensor tensor = std::move(it->second);
    announced_.erase(it);
    return tensor;
  }
  // Not announced here: either no rank of the set lives here, or every one
  // that does joined — then this node takes part with zeros.
  const job::ProcessSet* set = job_->process_sets().Find(set_id);
  if (set == nullptr || decision.code() != 0 || !SpansNodes(*set) || LocalMembers(*set) == 0 ||
      exec::ops::OpFor(from_cache ? cached->ranks.front().request().collective()
                       : decision.ranks().empty()
                           ? v1::COLLECTIVE_UNSPECIFIED
                           : decision.ranks(0).request().collective()) == nullptr) {
    return std::nullopt;
  }
  negotiation::ReadyTensor tensor;
  tensor.name = name;
  tensor.process_set_id = set_id;
  tensor.set_size = set->size();
  tensor.across_nodes = true;
  tensor.local_members = LocalMembers(*set);
  tensor.first_at = tensor.ready_at = Clock::now();
  return tensor;
}

void Engine::Decide(v1::Decisions decisions) {
  std::vector<negotiation::ReadyTensor> data;
  std::vector<negotiation::ReadyTensor> alone;   // alltoall: one transfer each, never fused
  std::vector<negotiation::ReadyTensor> device;  // CUDA tensors
  for (v1::Decision& decision : *decisions.mutable_decisions()) {
    if (decision.join_began()) {
      FailRefused(
          coordinator_->RefuseAfterJoin(decision.process_set_id(), decision.first_joined()));
      continue;
    }
    bool from_cache = false;
    const negotiation::ResponseCache::Entry* cached = nullptr;
    std::optional<negotiation::ReadyTensor> decided = DecidedTensor(decision, from_cache, cached);
    if (!decided.has_value()) continue;
    negotiation::ReadyTensor tensor = std::move(*decided);
    if (decision.code() != 0) {
      const absl::Status failed(static_cast<absl::StatusCode>(decision.code()), decision.message());
      log::Coord().warn("{}", failed.message());
      FailTensor(tensor, failed);
      continue;
    }
    const job::ProcessSet* set = job_->process_sets().Find(tensor.process_set_id);
    tensor.set_size = set != nullptr ? set->size() : tensor.set_size;
    // Negotiated: from the first local submission to node 0's decision.
    tensor.ready_at = Clock::now();
    RecordNegotiation(tensor);
    if (from_cache) {
      tensor.everyone = std::make_shared<const std::vector<v1::RankRequest>>(cached->ranks);
    } else {
      tensor.everyone = std::make_shared<const std::vector<v1::RankRequest>>(
          decision.ranks().begin(), decision.ranks().end());
    }
    if (tensor.request().collective() == v1::COLLECTIVE_JOIN) {
      tensor.completed_by = decision.last_joined();
    }
    if (exec::ops::OpFor(tensor.request().collective()) == nullptr) {
      RunControl(tensor);
      continue;
    }
    tensor.span = set_comms_->Find(tensor.process_set_id);
    if (tensor.span == nullptr) {
      const absl::Status why = absl::InternalError(
          absl::StrCat("no communicator for process set ", tensor.process_set_id, " across nodes"));
      BreakWorld(why, /*abandon_mpi=*/true);
      FailJob(why);
      return;
    }
    if (tensor.request().memory() == v1::MEMORY_KIND_CUDA) {
      device.push_back(std::move(tensor));  // NCCL, not MPI: see RunDeviceBatch
      continue;
    }
    (tensor.request().collective() == v1::COLLECTIVE_ALLTOALL ? alone : data)
        .push_back(std::move(tensor));
  }
  // CUDA tensors go to the GPU queue in decision order on every node, so
  // that the NCCL calls of every node pair up. A job that failed or ends
  // runs no more GPU work (FailJob aborts its NCCL calls): they fail here.
  if (job_->state() != job::JobState::kRunning) {
    for (const negotiation::ReadyTensor& tensor : device) FailTensor(tensor, job_->failure());
    device.clear();
  }
  for (exec::FusedBatch& batch :
       exec::PlanFusion(std::move(device), config_.fusion_threshold_bytes)) {
    deferred_.push_back(std::move(batch));
  }
  RunDeferred();
  // Every node plans the same batches from the same decisions, so that the
  // MPI transfers pair up. Fusion sizes are the same everywhere (they count
  // every rank's data), but for alltoall, whose slot holds only this node's
  // receivers: it runs alone.
  for (exec::FusedBatch& batch :
       exec::PlanFusion(std::move(data), config_.fusion_threshold_bytes)) {
    log::Coord().trace("decided: '{}' and {} more", batch.tensors.front().name,
                       batch.tensors.size() - 1);
    cross_queue_.push_back(std::move(batch));
  }
  for (negotiation::ReadyTensor& tensor : alone) {
    exec::FusedBatch batch;
    batch.bytes = exec::SlotBytes(tensor);
    batch.tensors.push_back(std::move(tensor));
    cross_queue_.push_back(std::move(batch));
  }
  AdvanceCrossNode();
}

bool Engine::AdvanceCrossNode() {
  bool progressed = false;
  while (job_ != nullptr && Decides(job_->state())) {
    if (!cross_active_.has_value()) {
      if (cross_queue_.empty()) break;
      exec::Executor::Outcome outcome = executor_.Reserve(cross_queue_.front(), *job_->results());
      if (outcome.deferred) {
        log::Exec().debug("'{}' across nodes waits for result space ({} of {} bytes in use)",
                          cross_queue_.front().tensors.front().name,
                          job_->results()->bytes_in_use(), job_->results()->capacity());
        break;  // a release will make room
      }
      if (!outcome.status.ok()) {
        // The other nodes run it and wait for this node's part in vain.
        const absl::Status why = absl::Status(
            outcome.status.code(),
            absl::StrCat("on ", DescribeNode(world_->rank()), ": ", outcome.status.message()));
        BreakWorld(why, /*abandon_mpi=*/true);
        FailJob(why);
        break;
      }
      exec::FusedBatch batch = std::move(cross_queue_.front());
      cross_queue_.pop_front();
      const exec::ops::PlanContext context{.data = job_->results()->data(),
                                           .zeros = executor_.zeros(),
                                           .chunk_bytes = config_.cross_node_chunk_bytes};
      std::vector<exec::CrossNodeStage> stages;
      exec::ops::OpFor(batch.tensors.front().request().collective())
          ->PlanAcrossNodes(batch, outcome.slots, context, stages);
      auto run = std::make_unique<exec::CrossNodeRun>(std::move(stages), transport_, pool_,
                                                      [this] { doorbell_.Ring(); });
      cross_active_ = ActiveCrossRun{std::move(batch), std::move(outcome), std::move(run)};
    }
    if (!cross_active_->run->Advance()) break;
    progressed = true;
    FinishCrossNode(cross_active_->run->status());
  }
  if (progressed) MaybeTearDownJob();
  return progressed;
}

void Engine::FinishCrossNode(absl::Status status) {
  ActiveCrossRun active = std::move(*cross_active_);
  cross_active_.reset();
  BatchRun run{.where = BatchRun::Where::kAcrossNodes, .outcome = std::move(active.outcome)};
  exec::Executor::Outcome& outcome = run.outcome;
  // The timeline shows the local part up to the first transfer, then the
  // transfers (CROSS_NODE) to the end.
  run.transferred_at = Clock::now();
  run.transferred = active.run->bytes();
  outcome.started = active.run->started();
  outcome.finished = active.run->transfers_started() == Clock::time_point{}
                         ? run.transferred_at
                         : active.run->transfers_started();
  if (!status.ok()) {
    const absl::Status why = absl::UnavailableError(absl::StrCat(
        "job '", job_->id(), "' could not exchange data across nodes: ", status.message()));
    log::Mpi().error("{}", why.message());
    // The run's transfers may be half done on other nodes: MPI cannot be
    // trusted with this world any more, and the result block stays MPI's.
    BreakWorld(why, /*abandon_mpi=*/true);
    (void)active.run.release();
    outcome.status = why;
    run.breaks_job = true;
    CompleteBatch(active.batch, run);
    return;
  }
  executor_.CheckFaults(active.batch, *job_->results(), outcome);
  size_t readers = 0;
  for (const negotiation::ReadyTensor& tensor : active.batch.tensors)
    readers += tensor.submissions.size();
  if (outcome.status.ok() && readers == 0) job_->results()->Release(outcome.block);
  run.breaks_job = !outcome.corrupted.empty() || outcome.results_lost;
  CompleteBatch(active.batch, run);
}

void Engine::OnJobEvent(int from, const v1::JobEvent& event) {
  const absl::Status why(static_cast<absl::StatusCode>(event.code()),
                         absl::StrCat("on ", DescribeNode(from), ": ", event.message()));
  if (event.daemon_stopping() || event.node_lost()) {
    // A daemon that stops will not finish the work it was deciding with us.
    const bool unfinished =
        !announced_.empty() || !cross_queue_.empty() || cross_active_.has_value();
    BreakWorld(why, /*abandon_mpi=*/event.node_lost() || unfinished);
  }
  if (job_->state() == job::JobState::kForming) return;
  if (event.kind() == v1::JobEvent::KIND_ENDED) {
    EndJob(why, Origin::kOtherNode);
  } else {
    FailJob(why, Origin::kOtherNode);
  }
}

void Engine::TellOtherNodes(v1::JobEvent::Kind kind, const absl::Status& why) {
  if (negotiator_ == nullptr) return;
  v1::JobEvent event;
  event.set_kind(kind);
  event.set_code(static_cast<int32_t>(why.code()));
  event.set_message(std::string(why.message()));
  event.set_daemon_stopping(shutting_down_);
  event.set_node_lost(!world_broken_.ok() && world_->abandoned());
  if (absl::Status told = negotiator_->Tell(event); !told.ok()) {
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
  if (!world_broken_.ok()) return;
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
  if (negotiator_ != nullptr) negotiator_->AddTo(totals_);
  if (world_->abandoned()) {
    // MPI may still own buffers of the job's transfers and requests of its
    // messages, and freeing communicators could wait on a dead node: leave
    // them all to the process's exit, which follows.
    (void)negotiator_.release();
    (void)set_comms_.release();
    if (cross_active_.has_value()) (void)cross_active_->run.release();
  }
  cross_active_.reset();
  cross_queue_.clear();
  announced_.clear();
  negotiator_.reset();
  set_comms_.reset();
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

}  // namespace collective::daemon::engine
