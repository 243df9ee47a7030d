// The transport among the daemons of a job over MPI: the data communicator
// of each set that spans nodes (world/set_communicators.h) carries the
// nonblocking collectives the executor plans (exec/node_transport.h).
// Engine thread only, like every MPI call.
#pragma once

#include "daemon/exec/node_transport.h"

namespace collective::daemon::world {

class MpiTransport : public exec::NodeTransport {
 public:
  absl::StatusOr<exec::Pending> StartAllreduce(const job::SetSpan& span, void* data, uint64_t count,
                                               v1::DataType dtype, v1::ReduceOp op) override;
  absl::StatusOr<exec::Pending> StartReduce(const job::SetSpan& span, void* data, uint64_t count,
                                            v1::DataType dtype, v1::ReduceOp op, int root) override;
  absl::StatusOr<exec::Pending> StartReduceScatter(const job::SetSpan& span, void* data,
                                                   const std::vector<uint64_t>& counts,
                                                   v1::DataType dtype, v1::ReduceOp op) override;
  absl::StatusOr<exec::Pending> StartAllgather(const job::SetSpan& span, void* data,
                                               uint64_t row_bytes,
                                               const std::vector<uint64_t>& rows,
                                               const std::vector<uint64_t>& displs) override;
  absl::StatusOr<exec::Pending> StartGather(const job::SetSpan& span, void* data,
                                            uint64_t row_bytes, const std::vector<uint64_t>& rows,
                                            const std::vector<uint64_t>& displs, int root) override;
  absl::StatusOr<exec::Pending> StartBroadcast(const job::SetSpan& span, void* data, uint64_t bytes,
                                               int root) override;
  absl::StatusOr<exec::Pending> StartExchange(
      const job::SetSpan& span, uint64_t row_bytes,
      const std::vector<std::vector<exec::RowBlock>>& send,
      const std::vector<std::vector<exec::RowBlock>>& receive) override;
  absl::StatusOr<exec::Pending> StartSend(const job::SetSpan& span, int peer, const void* data,
                                          uint64_t bytes, int tag, uint64_t chunk_bytes) override;
  absl::StatusOr<exec::Pending> StartReceive(const job::SetSpan& span, int peer, void* data,
                                             uint64_t bytes, int tag,
                                             uint64_t chunk_bytes) override;
};

}  // namespace collective::daemon::world
