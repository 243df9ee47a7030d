// A job across nodes: its negotiation with node 0, carrying out node 0's
// decisions in order, and running the decided batches, one at a time.
#include "daemon/engine/across_nodes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/engine/ready_check.h"
#include "daemon/exec/ops/ops.h"

namespace collective::daemon::engine {
namespace {

// How long a job's end waits for its last messages to leave this node.
constexpr auto kFlushTimeout = std::chrono::seconds(1);

// Node 0's check, with every rank's request.
absl::Status CheckAcrossNodes(const negotiation::ReadyTensor& everyone) {
  return CheckReady(everyone, CheckScope::kAcrossNodes);
}

template <typename Duration>
Clock::duration Ticks(Duration duration) {
  return std::chrono::duration_cast<Clock::duration>(duration);
}

}  // namespace

AcrossNodes::AcrossNodes(const config::DaemonConfig& config, const tune::TunedValues& knobs,
                         Host& host, exec::Executor& executor, exec::ThreadPool& pool,
                         std::function<void()> wake)
    : config_(config),
      knobs_(knobs),
      host_(host),
      executor_(executor),
      pool_(pool),
      wake_(std::move(wake)) {}

absl::Status AcrossNodes::Begin(JobWorld& world, const job::NodeLayout& layout) {
  world_ = &world;
  auto groups = world.MakeSetGroups(layout);
  if (!groups.ok()) return groups.status();
  set_groups_ = std::move(*groups);
  negotiator_ = std::make_unique<negotiation::Negotiator>(
      world.MakeControlLink(), layout, &CheckAcrossNodes,
      negotiation::Negotiator::Options{
          .cache_capacity = config_.response_cache_capacity,
          .heartbeat_interval = Ticks(std::chrono::milliseconds(config_.heartbeat_interval_ms)),
          .node_timeout = Ticks(std::chrono::duration<double>(config_.node_timeout_seconds)),
          .combine = &exec::ops::CombineNodeParts,
          .peer_parts = config_.cross_node_peer_parts,
          .decisions_after_run = true});
  return absl::OkStatus();
}

void AcrossNodes::End(v1::Totals& totals) {
  if (negotiator_ != nullptr) {
    negotiator_->AddTo(totals);
    // What node 0 decided and ran reaches the other nodes, which may still
    // wait for it.
    if (world_ != nullptr && !world_->abandoned()) {
      absl::Status sent = negotiator_->SendDecided();
      // A link whose messages go with it sends them before it goes.
      if (sent.ok()) sent = negotiator_->link().Flush(Clock::now() + kFlushTimeout);
      if (!sent.ok()) {
        log::Coord().warn("the last decisions of the job did not reach the other nodes: {}",
                          sent.message());
      }
    }
  }
  if (world_ != nullptr && world_->abandoned()) {
    // The transport may still own buffers of the job's transfers and
    // requests of its messages, and freeing communicators could wait on a
    // dead node: leave them all to the transport (MPI's: to the process's
    // exit, which follows).
    (void)negotiator_.release();
    (void)set_groups_.release();
    if (active_.has_value()) (void)active_->run.release();
  }
  active_.reset();
  queue_.clear();
  announced_.clear();
  negotiator_.reset();
  set_groups_.reset();
}

int32_t AcrossNodes::LocalMembers(const job::ProcessSet& set) const {
  const job::NodeLayout& layout = host_.job().layout();
  return static_cast<int32_t>(std::count_if(set.ranks.begin(), set.ranks.end(),
                                            [&](int32_t rank) { return layout.IsLocal(rank); }));
}

bool AcrossNodes::SpansNodes(const job::ProcessSet& set) const {
  return negotiator_ != nullptr && LocalMembers(set) < set.size();
}

std::shared_ptr<const job::SetSpan> AcrossNodes::SpanOf(int32_t process_set_id) const {
  return set_groups_ != nullptr ? set_groups_->Find(process_set_id) : nullptr;
}

absl::Status AcrossNodes::AddSet(const job::ProcessSet& set) {
  return set_groups_ != nullptr ? set_groups_->Add(set) : absl::OkStatus();
}

void AcrossNodes::RemoveSet(int32_t process_set_id) {
  if (set_groups_ != nullptr) set_groups_->Remove(process_set_id);
}

std::string AcrossNodes::DescribeNode(const job::Job* job, int node) {
  if (job == nullptr || job->state() == job::JobState::kForming || node >= job->layout().nodes()) {
    return absl::StrCat("node ", node);
  }
  const job::NodeLayout& layout = job->layout();
  const int32_t first = layout.offset(node);
  const int32_t count = layout.local_sizes[node];
  const std::string host =
      static_cast<size_t>(node) < layout.hosts.size() ? layout.hosts[node] + ", " : "";
  return absl::StrCat("node ", node, " (", host, count == 1 ? "rank " : "ranks ", first,
                      count == 1 ? "" : absl::StrCat("-", first + count - 1), ")");
}

bool AcrossNodes::Announce(negotiation::ReadyTensor& tensor) {
  if (negotiator_ == nullptr) return false;
  const job::ProcessSet* set = host_.job().process_sets().Find(tensor.process_set_id);
  if (set == nullptr || !SpansNodes(*set)) return false;
  tensor.across_nodes = true;
  tensor.local_members = LocalMembers(*set);
  const std::optional<uint32_t> bit = negotiator_->Announce(tensor, *set, tensor.local_members);
  if (bit.has_value() &&
      exec::ops::CombinedByNodeZero(tensor.request(), config_.cross_node_inline_bytes)) {
    // Node 0 combines it as it decides: this node's part goes with the bit.
    negotiator_->AddReduction(*bit, exec::ops::NodePart(tensor, executor_.zeros()));
  }
  announced_.emplace(std::pair(tensor.process_set_id, tensor.name), std::move(tensor));
  return true;
}

void AcrossNodes::AnnounceJoin(const job::ProcessSet& set, int32_t set_rank) {
  if (SpansNodes(set)) negotiator_->Joined(set.id, set_rank, set.ranks[set_rank]);
}

void AcrossNodes::ReportPartial(std::vector<v1::PartialTensor> partial) {
  negotiator_->ReportPartial(std::move(partial));
}

absl::StatusOr<AcrossNodes::Heard> AcrossNodes::Poll(Clock::time_point now) {
  auto incoming = negotiator_->Exchange(host_.job().process_sets(), now);
  if (!incoming.ok()) return incoming.status();
  Heard heard{.worked = !incoming->batches.empty() || !incoming->events.empty() || incoming->heard,
              .events = std::move(incoming->events)};
  for (v1::Decisions& batch : incoming->batches) {
    // An ending job still runs what node 0 decided (see Engine::EndJob).
    if (!Decides(host_.job().state())) break;
    Decide(std::move(batch));
  }
  // Node 0 ran its combined small allreduces first; the other nodes hear
  // of them now (most settled them from the parts already).
  if (negotiator_ != nullptr) {
    if (absl::Status sent = negotiator_->SendDecided(); !sent.ok()) return sent;
  }
  return heard;
}

int AcrossNodes::Silent(Clock::time_point now) const { return negotiator_->Silent(now); }

bool AcrossNodes::WaitsForDecisions() const {
  return negotiator_->coordinator() || !announced_.empty() || !queue_.empty();
}

bool AcrossNodes::transferring() const {
  return active_.has_value() && active_->run->waiting_for_transfers();
}

std::optional<negotiation::ReadyTensor> AcrossNodes::DecidedTensor(
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
  const job::ProcessSet* set = host_.job().process_sets().Find(set_id);
  const v1::TensorRequest* first = from_cache                 ? &cached->ranks.front().request()
                                   : decision.ranks().empty() ? nullptr
                                                              : &decision.ranks(0).request();
  if (set == nullptr || decision.code() != 0 || !SpansNodes(*set) || LocalMembers(*set) == 0 ||
      first == nullptr || exec::ops::OpFor(*first) == nullptr) {
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

void AcrossNodes::Decide(v1::Decisions decisions) {
  if (decisions.has_tuning()) host_.Tuned(decisions.tuning());
  std::vector<negotiation::ReadyTensor> data;
  std::vector<negotiation::ReadyTensor> combined;  // node 0 combined them: no transfer
  std::vector<negotiation::ReadyTensor> alone;     // alltoall: one transfer each, never fused
  std::vector<negotiation::ReadyTensor> device;    // CUDA tensors
  for (v1::Decision& decision : *decisions.mutable_decisions()) {
    if (decision.join_began()) {
      host_.RefuseAfterJoin(decision.process_set_id(), decision.first_joined());
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
      host_.FailTensor(tensor, failed);
      continue;
    }
    const job::ProcessSet* set = host_.job().process_sets().Find(tensor.process_set_id);
    tensor.set_size = set != nullptr ? set->size() : tensor.set_size;
    // Negotiated: from the first local submission to node 0's decision.
    tensor.ready_at = Clock::now();
    host_.Negotiated(tensor);
    if (from_cache) {
      tensor.everyone = std::make_shared<const std::vector<v1::RankRequest>>(cached->ranks);
    } else {
      tensor.everyone = std::make_shared<const std::vector<v1::RankRequest>>(
          decision.ranks().begin(), decision.ranks().end());
    }
    if (tensor.request().collective() == v1::COLLECTIVE_JOIN) {
      tensor.completed_by = decision.last_joined();
    }
    if (decision.has_combined()) {
      if (decision.combined().size() != tensor.request().length()) {
        // Every other node takes it: this one cannot run the tensor alike.
        host_.BreakAndFail(absl::DataLossError(absl::StrCat(
            "node 0 sent ", decision.combined().size(), " bytes as the combined result of '",
            tensor.name, "', which has ", tensor.request().length())));
        return;
      }
      tensor.combined =
          std::make_shared<const std::string>(std::move(*decision.mutable_combined()));
    }
    if (exec::ops::OpFor(tensor.request()) == nullptr) {
      host_.RunControl(tensor);
      continue;
    }
    tensor.span = set_groups_->Find(tensor.process_set_id);
    if (tensor.span == nullptr) {
      host_.BreakAndFail(absl::InternalError(absl::StrCat("no communicator for process set ",
                                                          tensor.process_set_id, " across nodes")));
      return;
    }
    if (tensor.request().memory() == v1::MEMORY_KIND_CUDA) {
      device.push_back(std::move(tensor));  // NCCL, not MPI: see Engine::RunDeviceBatch
      continue;
    }
    if (tensor.combined != nullptr) {
      combined.push_back(std::move(tensor));
    } else {
      (tensor.request().collective() == v1::COLLECTIVE_ALLTOALL ? alone : data)
          .push_back(std::move(tensor));
    }
  }
  // CUDA tensors go to the GPU queue in decision order on every node, so
  // that the NCCL calls of every node pair up. A job that failed or ends
  // runs no more GPU work (Engine::FailJob aborts its NCCL calls): they fail
  // here.
  if (host_.job().state() != job::JobState::kRunning) {
    for (const negotiation::ReadyTensor& tensor : device) {
      host_.FailTensor(tensor, host_.job().failure());
    }
    device.clear();
  }
  host_.RunOnDevice(exec::PlanFusion(std::move(device), knobs_.fusion_threshold_bytes));
  // Tensors node 0 combined transfer nothing: their batches pair up with
  // nobody's, and go first.
  for (exec::FusedBatch& batch :
       exec::PlanFusion(std::move(combined), knobs_.fusion_threshold_bytes)) {
    queue_.push_back(std::move(batch));
  }
  // Every node plans the same batches from the same decisions, so that the
  // MPI transfers pair up. Fusion sizes are the same everywhere (they count
  // every rank's data), but for alltoall, whose slot holds only this node's
  // receivers: it runs alone.
  for (exec::FusedBatch& batch : exec::PlanFusion(std::move(data), knobs_.fusion_threshold_bytes)) {
    log::Coord().trace("decided: '{}' and {} more", batch.tensors.front().name,
                       batch.tensors.size() - 1);
    batch.chunk_bytes = knobs_.cross_node_chunk_bytes;
    queue_.push_back(std::move(batch));
  }
  for (negotiation::ReadyTensor& tensor : alone) {
    exec::FusedBatch batch;
    batch.bytes = exec::SlotBytes(tensor);
    batch.tensors.push_back(std::move(tensor));
    batch.chunk_bytes = knobs_.cross_node_chunk_bytes;
    queue_.push_back(std::move(batch));
  }
  Advance();
}

bool AcrossNodes::Advance() {
  bool progressed = false;
  while (Decides(host_.job().state())) {
    job::Job& job = host_.job();
    if (!active_.has_value()) {
      if (queue_.empty()) break;
      exec::Executor::Outcome outcome = executor_.Reserve(queue_.front(), *job.results());
      if (outcome.deferred) {
        log::Exec().debug("'{}' across nodes waits for result space ({} of {} bytes in use)",
                          queue_.front().tensors.front().name, job.results()->bytes_in_use(),
                          job.results()->capacity());
        break;  // a release will make room
      }
      if (!outcome.status.ok()) {
        // The other nodes run it and wait for this node's part in vain.
        host_.BreakAndFail(absl::Status(
            outcome.status.code(), absl::StrCat("on ", DescribeNode(&job, world_->node()), ": ",
                                                outcome.status.message())));
        break;
      }
      exec::FusedBatch batch = std::move(queue_.front());
      queue_.pop_front();
      const exec::ops::PlanContext context{.data = job.results()->data(),
                                           .zeros = executor_.zeros(),
                                           .chunk_bytes = batch.chunk_bytes};
      std::vector<exec::CrossNodeStage> stages;
      exec::ops::OpFor(batch.tensors.front().request())
          ->PlanAcrossNodes(batch, outcome.slots, context, stages);
      auto run = std::make_unique<exec::CrossNodeRun>(std::move(stages), world_->transport(), pool_,
                                                      wake_);
      active_ = Active{std::move(batch), std::move(outcome), std::move(run)};
    }
    if (!active_->run->Advance()) break;
    progressed = true;
    Active finished = std::move(*active_);
    active_.reset();
    const absl::Status status = finished.run->status();
    host_.Finished(std::move(finished.batch), std::move(finished.outcome), std::move(finished.run),
                   status);
  }
  if (progressed) host_.MaybeTearDown();
  return progressed;
}

void AcrossNodes::Fail(const absl::Status& why) {
  if (negotiator_ != nullptr && negotiator_->coordinator()) negotiator_->EndAll(why);
}

bool AcrossNodes::FailStalled(int32_t process_set_id, const std::string& name,
                              const absl::Status& why) {
  return negotiator_ != nullptr && negotiator_->Fail(process_set_id, name, why);
}

std::vector<negotiation::ReadyTensor> AcrossNodes::Abandon() {
  std::vector<negotiation::ReadyTensor> ready;
  for (auto& [key, tensor] : announced_) ready.push_back(std::move(tensor));
  announced_.clear();
  for (exec::FusedBatch& batch : queue_) {
    for (negotiation::ReadyTensor& tensor : batch.tensors) ready.push_back(std::move(tensor));
  }
  queue_.clear();
  if (active_.has_value()) {
    for (negotiation::ReadyTensor& tensor : active_->batch.tensors) {
      ready.push_back(std::move(tensor));
    }
    // MPI keeps the run's buffers (its result block, the arenas it reads)
    // and requests: they are the process's until it exits.
    (void)active_->run.release();
    active_.reset();
  }
  return ready;
}

absl::Status AcrossNodes::Tell(const v1::JobEvent& event) {
  if (negotiator_ == nullptr) return absl::OkStatus();
  return negotiator_->Tell(event);
}

void AcrossNodes::Tune(v1::Tuning tuning) {
  if (negotiator_ != nullptr) negotiator_->Tune(std::move(tuning));
}

bool AcrossNodes::View::unfinished() const {
  return !across_.announced_.empty() || !across_.queue_.empty() || across_.active_.has_value();
}

void AcrossNodes::View::AddTo(v1::Totals& totals) const {
  if (active()) across_.negotiator_->AddTo(totals);
}

void AcrossNodes::View::Describe(v1::NegotiationStatus* out) const {
  if (active()) across_.negotiator_->Describe(out);
}

std::vector<negotiation::WaitingTensor> AcrossNodes::View::Waiting(const job::ProcessSetTable& sets,
                                                                   Clock::time_point now) const {
  return across_.negotiator_->Waiting(sets, now);
}

std::vector<negotiation::WaitingTensor> AcrossNodes::View::Announced() const {
  std::vector<negotiation::WaitingTensor> waiting;
  for (const auto& [key, tensor] : across_.announced_) {
    negotiation::WaitingTensor announced{.process_set_id = key.first,
                                         .name = key.second,
                                         .collective = tensor.request().collective(),
                                         .first_at = tensor.first_at,
                                         .across_nodes = true};
    for (const negotiation::Submission& submission : tensor.submissions) {
      announced.ready_ranks.push_back(submission.rank);
    }
    waiting.push_back(std::move(announced));
  }
  return waiting;
}

}  // namespace collective::daemon::engine
