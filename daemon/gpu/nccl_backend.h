// The NCCL half of the CUDA backend: communicators (one NCCL rank per
// device of this node, single process, multi-GPU), their errors and aborts,
// and the collectives on the streams the CUDA backend owns. Built only with
// CUDA and NCCL; engine thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collective/v1/types.pb.h"
#include "daemon/gpu/device_backend.h"

namespace collective::daemon::gpu {

// The status of an NCCL call: OK, or UNAVAILABLE naming `what`, NCCL's
// description of the result and, given a communicator, its last error.
absl::Status NcclStatus(ncclResult_t result, absl::string_view what, ncclComm_t comm = nullptr);

class NcclBackend {
 public:
  NcclBackend() = default;
  ~NcclBackend();  // destroys what is left
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  absl::StatusOr<std::string> NewUniqueId();
  absl::StatusOr<CommId> Create(const CommunicatorSpec& spec);
  absl::Status AsyncError(CommId comm);
  void Abort(CommId comm);
  void Destroy(CommId comm);

  // The communicator's rank on `device`, or an error naming both.
  absl::StatusOr<ncclComm_t> Rank(CommId comm, int device) const;

  absl::Status AllReduce(CommId comm, int device, cudaStream_t stream, const void* send, void* recv,
                         uint64_t count, v1::DataType dtype, v1::ReduceOp op);
  absl::Status Broadcast(CommId comm, int device, cudaStream_t stream, const void* send, void* recv,
                         uint64_t bytes, int root);
  absl::Status Reduce(CommId comm, int device, cudaStream_t stream, const void* send, void* recv,
                      uint64_t count, v1::DataType dtype, v1::ReduceOp op, int root);
  absl::Status Send(CommId comm, int device, cudaStream_t stream, const void* buffer,
                    uint64_t bytes, int peer);
  absl::Status Recv(CommId comm, int device, cudaStream_t stream, void* buffer, uint64_t bytes,
                    int peer);

 private:
  absl::flat_hash_map<CommId, std::map<int, ncclComm_t>> comms_;  // by device ordinal
  CommId next_ = 1;
};

}  // namespace collective::daemon::gpu
