// The engine's part in the MPI world of daemons: joining it, forming a job
// across nodes without blocking the engine, and running collectives whose
// process set spans nodes — announced to node 0, run in its order, the
// nodes' partial results combined over MPI.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "daemon/cross_node.h"
#include "daemon/engine.h"
#include "daemon/mismatch.h"
#include "daemon/ops/ops.h"
#include "daemon/reduce_kernels.h"

namespace collective::daemon {
namespace {

// Node 0's checks, with every rank's request: the agreement of all ranks,
// then what the collective itself needs (splits, the root) — and what does
// not span nodes yet.
absl::Status CheckAcrossNodes(const ReadyTensor& everyone) {
  if (absl::Status agreed = CheckAgreement(everyone); !agreed.ok()) return agreed;
  const v1::Collective collective = everyone.request().collective();
  const ops::CollectiveOp* op = ops::OpFor(collective);
  if (op == nullptr) return absl::OkStatus();  // barrier, process-set changes
  if (collective != v1::COLLECTIVE_ALLREDUCE) {
    return absl::UnimplementedError(absl::StrCat(
        CollectiveName(collective), " of '", everyone.name,
        "' spans nodes, which this version does not support yet (across nodes: allreduce, "
        "barrier and process-set changes)"));
  }
  if (everyone.process_set_id != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "allreduce of '", everyone.name, "' on process set ", everyone.process_set_id,
        " spans nodes; across nodes this version supports the global process set only"));
  }
  return op->Check(everyone);
}

}  // namespace

absl::Status Engine::StartWorld() {
  const WorldMode mode =
      config_.multi_node == config::MultiNode::kOff ? WorldMode::kSingle : WorldMode::kAuto;
  auto world = World::Create(mode);
  if (!world.ok()) return world.status();
  world_ = std::move(*world);
  return absl::OkStatus();
}

bool Engine::WaitsForWorld() const {
  // Node 0 hears from the others at any time; the others wait for its
  // decisions. Each looks every cycle_time_ms while a job spans nodes.
  return exchange_ != nullptr || negotiator_ != nullptr;
}

int32_t Engine::LocalMembers(const ProcessSet& set) const {
  const NodeLayout& layout = job_->layout();
  return static_cast<int32_t>(std::count_if(set.ranks.begin(), set.ranks.end(),
                                            [&](int32_t rank) { return layout.IsLocal(rank); }));
}

bool Engine::PollWorld() {
  if (exchange_ != nullptr) {
    std::optional<absl::StatusOr<NodeLayout>> layout = exchange_->Poll();
    if (!layout.has_value()) return false;
    exchange_.reset();
    if (job_ == nullptr || job_->state() != JobState::kForming) return true;
    if (!layout->ok()) {
      AbortFormation(layout->status());
      return true;
    }
    FinishFormation(**layout);
    if (job_ != nullptr && job_->layout().nodes() > 1) {
      negotiator_ = std::make_unique<Negotiator>(*world_, job_->layout(), &CheckAcrossNodes);
    }
    return true;
  }
  if (negotiator_ == nullptr || job_ == nullptr) return false;
  auto decisions = negotiator_->Exchange(job_->process_sets());
  if (!decisions.ok()) {
    FailJob(absl::UnavailableError(absl::StrCat(
        "the daemons of job '", job_->id(), "' lost each other: ", decisions.status().message())));
    return true;
  }
  if (decisions->empty()) return false;
  for (v1::Decisions& batch : *decisions) Decide(std::move(batch));
  return true;
}

bool Engine::AnnounceIfAcrossNodes(ReadyTensor& tensor) {
  if (negotiator_ == nullptr) return false;
  const ProcessSet* set = job_->process_sets().Find(tensor.process_set_id);
  if (set == nullptr || LocalMembers(*set) == set->size()) return false;
  tensor.across_nodes = true;
  negotiator_->Announce(tensor, *set);
  announced_.emplace(std::pair(tensor.process_set_id, tensor.name), std::move(tensor));
  return true;
}

void Engine::Decide(v1::Decisions decisions) {
  std::vector<ReadyTensor> data;
  for (v1::Decision& decision : *decisions.mutable_decisions()) {
    auto it = announced_.find({decision.process_set_id(), decision.name()});
    if (it == announced_.end()) continue;  // no member of its set here
    ReadyTensor tensor = std::move(it->second);
    announced_.erase(it);
    if (decision.code() != 0) {
      const absl::Status failed(static_cast<absl::StatusCode>(decision.code()), decision.message());
      log::Coord().warn("{}", failed.message());
      FailTensor(tensor, failed);
    } else if (ops::OpFor(tensor.request().collective()) == nullptr) {
      RunControl(tensor);
    } else {
      data.push_back(std::move(tensor));
    }
  }
  // Every node plans the same batches from the same decisions, so that the
  // MPI transfers below pair up.
  for (FusedBatch& batch : PlanFusion(std::move(data), config_.fusion_threshold_bytes)) {
    deferred_.push_back(std::move(batch));
  }
  RunDeferred();
}

absl::Status Engine::CombineAcrossNodes(const FusedBatch& batch, const Executor::Outcome& outcome) {
  for (size_t t = 0; t < batch.tensors.size(); ++t) {
    const ReadyTensor& tensor = batch.tensors[t];
    const v1::TensorRequest& request = tensor.request();
    std::byte* slot = job_->results()->data() + outcome.slots[t];
    const uint64_t count = request.length() / ElementSize(request.dtype());
    const v1::ReduceOp op =
        request.op() == v1::REDUCE_OP_AVERAGE ? v1::REDUCE_OP_SUM : request.op();
    if (absl::Status combined =
            AllreduceAcrossNodes(world_->data(), slot, count, request.dtype(), op);
        !combined.ok()) {
      return absl::UnavailableError(absl::StrCat("allreduce of '", tensor.name,
                                                 "' across the nodes of job '", job_->id(),
                                                 "' failed: ", combined.message()));
    }
    const exec::ReduceSpec scale = ops::FinalScaleSpec(tensor);
    if (count > 0 && request.dtype() != v1::DATA_TYPE_BOOL &&
        (scale.postscale != 1.0 || scale.divisor != 1)) {
      const void* inputs[] = {slot};
      exec::Reduce(scale, inputs, slot, count);
    }
  }
  return absl::OkStatus();
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

}  // namespace collective::daemon
