// Engine: the GPU path — clients' CUDA registrations, batches of CUDA tensors
// handed to the GPU executor, their end on the GPU, and the health of the
// job's GPU work. A CUDA request completes once its work is queued on the
// GPU (the client's stream then waits on the slot's done event); the engine
// never waits for the GPU itself.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/engine/engine.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/world/nccl_world.h"
#include "shm/segment_layout.h"

namespace collective::daemon::engine {
namespace {

// Alltoall's received splits, one array per rank, in the result segment.
uint64_t SplitsBytes(const negotiation::ReadyTensor& tensor) {
  return shm::RoundUp(sizeof(int64_t) * static_cast<uint64_t>(tensor.set_size),
                      shm::kDataAlignment);
}

}  // namespace

void Engine::OnRegisterCuda(job::ClientRecord& client, const v1::RegisterCuda& message) {
  const absl::Status status = gpu_.Register(client.id, message);
  if (!status.ok()) {
    log::Nccl().warn("{}: CUDA registration refused: {}", job::DescribeMember(client),
                     status.message());
  }
  if (client.link == nullptr) return;
  v1::DaemonMessage answer;
  v1::CudaRegistered* registered = answer.mutable_cuda_registered();
  registered->set_registration_id(message.registration_id());
  registered->set_code(static_cast<int>(status.code()));
  registered->set_message(std::string(status.message()));
  client.link->Send(std::move(answer));
}

void Engine::ForgetDevices(const job::ClientRecord& client) { gpu_.Forget(client.id); }

bool Engine::RunDeviceBatch() {
  uint64_t splits_bytes = 0;
  uint32_t readers = 0;
  for (const negotiation::ReadyTensor& tensor : deferred_.front().tensors) {
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
        return world::ShareLayoutOverMpi(world_->data(), devices, new_id);
      });
  const exec::FusedBatch batch = std::move(deferred_.front());
  deferred_.pop_front();
  BatchRun run{.where = BatchRun::Where::kDevice};
  run.outcome.status = outcome.status;
  run.outcome.started = outcome.started;
  run.outcome.finished = Clock::now();
  run.breaks_job = outcome.broken;
  run.device_batch = outcome.batch;
  run.splits_block = block;
  if (!outcome.status.ok()) {
    if (block != kNoBlock) job_->results()->Discard(block);
    log::Nccl().error("{}", outcome.status.message());
  }
  CompleteBatch(batch, run);
  return true;
}

void Engine::CompleteOnDevice(const negotiation::ReadyTensor& tensor, const std::string& name,
                              uint64_t block, uint64_t& splits_at) {
  const exec::ops::CollectiveOp& op = *exec::ops::OpFor(tensor.request().collective());
  const bool alltoall = tensor.request().collective() == v1::COLLECTIVE_ALLTOALL;
  const std::vector<std::vector<int64_t>> splits =
      alltoall ? exec::ops::AlltoallSplits(tensor) : std::vector<std::vector<int64_t>>();
  for (size_t i = 0; i < tensor.submissions.size(); ++i) {
    const negotiation::Submission& submission = tensor.submissions[i];
    exec::ops::RankResult result = op.ResultOf(tensor, i);
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

void Engine::OnGpuDone(const GpuDoneEvent& event) {
  const std::optional<gpu::GpuExecutor::Done> done = gpu_.OnDeviceDone(event.batch);
  if (!done.has_value()) return;
  const auto rows = gpu_rows_.find(done->batch);
  if (rows == gpu_rows_.end()) return;
  const uint64_t now = observe::MonotonicNanos();
  for (const auto& [name, bytes] : rows->second) {
    timeline_.Phase(name, exec::kPhaseGpu, Nanos(done->started), now, bytes);
  }
  gpu_rows_.erase(rows);
}

void Engine::CheckGpu(Clock::time_point now) {
  if (gpu_.in_flight() == 0 || job_ == nullptr || job_->state() != job::JobState::kRunning) return;
  const absl::Status health = gpu_.Health(now);
  if (health.ok()) return;
  log::Nccl().error("job '{}': {}", job_->id(), health.message());
  FailJob(health);
}

}  // namespace collective::daemon::engine
