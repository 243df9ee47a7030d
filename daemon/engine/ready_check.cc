#include "daemon/engine/ready_check.h"

#include "common/status_macros.h"
#include "daemon/exec/ops/collective_op.h"
#include "daemon/gpu/gpu_executor.h"
#include "daemon/negotiation/mismatch.h"

namespace collective::daemon::engine {

absl::Status CheckReady(const negotiation::ReadyTensor& tensor, CheckScope scope) {
  RETURN_IF_ERROR(negotiation::CheckAgreement(tensor));
  const exec::ops::CollectiveOp* op = exec::ops::OpFor(tensor.request());
  if (op == nullptr) {
    // Barrier and process-set changes wait for every rank, like join.
    return tensor.has_joined_ranks() ? negotiation::RefusedAfterJoin(tensor) : absl::OkStatus();
  }
  RETURN_IF_ERROR(op->Check(tensor));
  if (tensor.request().memory() != v1::MEMORY_KIND_CUDA) return absl::OkStatus();
  return scope == CheckScope::kAcrossNodes ? gpu::GpuExecutor::CheckAcrossNodes(tensor)
                                           : gpu::GpuExecutor::Check(tensor);
}

}  // namespace collective::daemon::engine
