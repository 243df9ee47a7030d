#include "daemon/world/mpi_transport.h"

#include <utility>

#include "daemon/world/mpi_transfers.h"
#include "daemon/world/set_communicators.h"
#include "daemon/world/world.h"

namespace collective::daemon::world {
namespace {

class MpiPending : public exec::PendingTransfer {
 public:
  // The group stays alive (its communicator with it) while MPI may use it.
  explicit MpiPending(std::shared_ptr<const job::NodeGroup> group) : group_(std::move(group)) {}

  // An unfinished transfer is left to MPI: its requests are freed (MPI
  // completes or drops them), and the types it made stay, since the world
  // that ran it is broken anyway.
  ~MpiPending() override {
    if (done_) return;
    for (MPI_Request& request : mpi_.requests) {
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    }
  }

  absl::StatusOr<bool> Test() override {
    if (done_) return true;
    int done = 1;
    if (!mpi_.requests.empty()) {
      const int error = MPI_Testall(static_cast<int>(mpi_.requests.size()), mpi_.requests.data(),
                                    &done, MPI_STATUSES_IGNORE);
      if (absl::Status tested = MpiStatus(error, "MPI_Testall"); !tested.ok()) return tested;
    }
    if (!done) return false;
    for (MPI_Datatype& type : mpi_.types) MPI_Type_free(&type);
    mpi_.types.clear();
    done_ = true;
    return true;
  }

  InFlightMpi& mpi() { return mpi_; }

 private:
  std::shared_ptr<const job::NodeGroup> group_;
  InFlightMpi mpi_;
  bool done_ = false;
};

// Runs `start` on a new pending transfer of `span`'s communicator.
template <typename Start>
absl::StatusOr<exec::Pending> Begin(const job::SetSpan& span, Start start) {
  auto pending = std::make_unique<MpiPending>(span.group);
  if (absl::Status started = start(CommOf(span), pending->mpi()); !started.ok()) return started;
  return pending;
}

}  // namespace

absl::StatusOr<exec::Pending> MpiTransport::StartAllreduce(const job::SetSpan& span, void* data,
                                                           uint64_t count, v1::DataType dtype,
                                                           v1::ReduceOp op) {
  return Begin(span, [&](MPI_Comm comm, InFlightMpi& mpi) {
    return world::StartAllreduce(comm, data, count, dtype, op, mpi);
  });
}

absl::StatusOr<exec::Pending> MpiTransport::StartReduce(const job::SetSpan& span, void* data,
                                                        uint64_t count, v1::DataType dtype,
                                                        v1::ReduceOp op, int root) {
  return Begin(span, [&](MPI_Comm comm, InFlightMpi& mpi) {
    return world::StartReduce(comm, data, count, dtype, op, root, mpi);
  });
}

absl::StatusOr<exec::Pending> MpiTransport::StartReduceScatter(const job::SetSpan& span, void* data,
                                                               const std::vector<uint64_t>& counts,
                                                               v1::DataType dtype,
                                                               v1::ReduceOp op) {
  return Begin(span, [&](MPI_Comm comm, InFlightMpi& mpi) {
    return world::StartReduceScatter(comm, data, counts, dtype, op, mpi);
  });
}

absl::StatusOr<exec::Pending> MpiTransport::StartAllgather(const job::SetSpan& span, void* data,
                                                           uint64_t row_bytes,
                                                           const std::vector<uint64_t>& rows,
                                                           const std::vector<uint64_t>& displs) {
  return Begin(span, [&](MPI_Comm comm, InFlightMpi& mpi) {
    return world::StartAllgather(comm, data, row_bytes, rows, displs, mpi);
  });
}

absl::StatusOr<exec::Pending> MpiTransport::StartGather(const job::SetSpan& span, void* data,
                                                        uint64_t row_bytes,
                                                        const std::vector<uint64_t>& rows,
                                                        const std::vector<uint64_t>& displs,
                                                        int root) {
  return Begin(span, [&](MPI_Comm comm, InFlightMpi& mpi) {
    return world::StartGather(comm, data, row_bytes, rows, displs, root, mpi);
  });
}

absl::StatusOr<exec::Pending> MpiTransport::StartBroadcast(const job::SetSpan& span, void* data,
                                                           uint64_t bytes, int root) {
  return Begin(span, [&](MPI_Comm comm, InFlightMpi& mpi) {
    return world::StartBroadcast(comm, data, bytes, root, mpi);
  });
}

absl::StatusOr<exec::Pending> MpiTransport::StartExchange(
    const job::SetSpan& span, uint64_t row_bytes,
    const std::vector<std::vector<exec::RowBlock>>& send,
    const std::vector<std::vector<exec::RowBlock>>& receive) {
  return Begin(span, [&](MPI_Comm comm, InFlightMpi& mpi) {
    return world::StartExchange(comm, row_bytes, send, receive, mpi);
  });
}

absl::StatusOr<exec::Pending> MpiTransport::StartSend(const job::SetSpan& span, int peer,
                                                      const void* data, uint64_t bytes, int tag,
                                                      uint64_t chunk_bytes) {
  return Begin(span, [&](MPI_Comm comm, InFlightMpi& mpi) {
    return world::StartSend(comm, peer, data, bytes, tag, chunk_bytes, mpi);
  });
}

absl::StatusOr<exec::Pending> MpiTransport::StartReceive(const job::SetSpan& span, int peer,
                                                         void* data, uint64_t bytes, int tag,
                                                         uint64_t chunk_bytes) {
  return Begin(span, [&](MPI_Comm comm, InFlightMpi& mpi) {
    return world::StartReceive(comm, peer, data, bytes, tag, chunk_bytes, mpi);
  });
}

}  // namespace collective::daemon::world
