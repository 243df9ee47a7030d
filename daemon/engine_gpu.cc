// Engine: the GPU path — clients' CUDA registrations, batches of CUDA tensors
// handed to the GPU executor, their end on the GPU, and the health of the
// job's GPU work. A CUDA request completes once its work is queued on the
// GPU (the client's stream then waits on the slot's done event); the engine
// never waits for the GPU itself.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/engine.h"
#include "daemon/gpu/nccl_world.h"
#include "daemon/ops/ops.h"
#include "shm/segment_layout.h"

namespace collective::daemon {
namespace {

// Alltoall's received splits, one array per rank, in the result segment.
uint64_t SplitsBytes(const ReadyTensor& tensor) {
  return shm::RoundUp(sizeof(int64_t) * static_cast<uint64_t>(tensor.set_size),
                      shm::kDataAlignment);
}

}  // namespace

void Engine::OnRegisterCuda(ClientRecord& client, const v1::RegisterCuda& message) {
  const absl::Status status = gpu_.Register(client.id, message);
  if (!status.ok()) {
    log::Nccl().warn("{}: CUDA registration refused: {}", DescribeMember(client), status.message());
  }
  if (client.link == nullptr) return;
  v1::DaemonMessage answer;
  v1::CudaRegistered* registered = answer.mutable_cuda_registered();
  registered->set_registration_id(message.registration_id());
  registered->set_code(static_cast<int>(status.code()));
  registered->set_message(std::string(status.message()));
  client.link->Send(std::move(answer));
}

void Engine::ForgetDevices(const ClientRecord& client) { gpu_.Forget(client.id); }

bool Engine::RunDeviceBatch() {
  uint64_t splits_bytes = 0;
  uint32_t readers = 0;
  for (const ReadyTensor& tensor : deferred_.front().tensors) {
    if (tensor.request().collective() != v1::COLLECTIVE_ALLTOALL) continue;
    splits_bytes += SplitsBytes(tensor) * tensor.submissions.size();
    readers += static_cast<uint32_t>(tensor.submissions.size());
  }
  uint64_t block = kNoBlock;
  if (splits_bytes > 0) {
    const std::optional<uint64_t> allocated = job_->results()->Allocate(splits_bytes, readers);
    if (!allocated.has_value()) return false;
    block = *allocated;
  }
  const gpu::GpuExecutor::Outcome outcome =
      gpu_.Run(deferred_.front(), [this](int devices, const gpu::NewUniqueId& new_id) {
        return gpu::ShareLayoutOverMpi(world_->data(), devices, new_id);
      });
  const FusedBatch batch = std::move(deferred_.front());
  deferred_.pop_front();
  if (!outcome.status.ok()) {
    if (block != kNoBlock) job_->results()->Discard(block);
    log::Nccl().error("{}", outcome.status.message());
    for (const ReadyTensor& tensor : batch.tensors) FailTensor(tensor, outcome.status);
    if (outcome.broken) FailJob(outcome.status);
    return true;
  }
  totals_.set_fused_batches(totals_.fused_batches() + 1);
  std::vector<std::pair<std::string, uint64_t>>* rows =
      timeline_.active() ? &gpu_rows_[outcome.batch] : nullptr;
  uint64_t splits_at = block;
  for (const ReadyTensor& tensor : batch.tensors) {
    const ops::CollectiveOp& op = *ops::OpFor(tensor.request().collective());
    const bool alltoall = tensor.request().collective() == v1::COLLECTIVE_ALLTOALL;
    const std::vector<std::vector<int64_t>> splits =
        alltoall ? ops::AlltoallSplits(tensor) : std::vector<std::vector<int64_t>>();
    uint64_t bytes = 0;
    for (const Submission& submission : tensor.submissions) bytes += submission.request.length();
    totals_.set_collectives(totals_.collectives() + 1);
    totals_.set_bytes_reduced(totals_.bytes_reduced() + bytes);
    const std::string name = timeline_.active() ? TimelineName(tensor) : std::string();
    if (rows != nullptr) {
      timeline_.Phase(name, kPhaseQueue, Nanos(tensor.ready_at), Nanos(outcome.started), 0);
      rows->emplace_back(name, bytes);
    }
    for (size_t i = 0; i < tensor.submissions.size(); ++i) {
      const Submission& submission = tensor.submissions[i];
      ops::RankResult result = op.ResultOf(tensor, i);
      result.offset = 0;
      if (!alltoall) {
        Complete(*submission.client, submission.request, kNoBlock, 0, result, name,
                 shm::kRecordDeviceResult);
        continue;
      }
      // The rows this rank received from each rank.
      auto* received = reinterpret_cast<int64_t*>(job_->results()->data() + splits_at);
      for (size_t sender = 0; sender < splits.size(); ++sender) {
        received[sender] = splits[sender][static_cast<size_t>(submission.set_rank)];
      }
      result.aux_offset = 0;
      Complete(*submission.client, submission.request, block, splits_at, result, name,
               shm::kRecordDeviceResult);
      splits_at += SplitsBytes(tensor);
    }
  }
  return true;
}

void Engine::OnGpuDone(const GpuDoneEvent& event) {
  const std::optional<gpu::GpuExecutor::Done> done = gpu_.OnDeviceDone(event.batch);
  if (!done.has_value()) return;
  const auto rows = gpu_rows_.find(done->batch);
  if (rows == gpu_rows_.end()) return;
  const uint64_t now = MonotonicNanos();
  for (const auto& [name, bytes] : rows->second) {
    timeline_.Phase(name, kPhaseGpu, Nanos(done->started), now, bytes);
  }
  gpu_rows_.erase(rows);
}

void Engine::CheckGpu(Clock::time_point now) {
  if (gpu_.in_flight() == 0 || job_ == nullptr || job_->state() != JobState::kRunning) return;
  const absl::Status health = gpu_.Health(now);
  if (health.ok()) return;
  log::Nccl().error("job '{}': {}", job_->id(), health.message());
  FailJob(health);
}

}  // namespace collective::daemon
