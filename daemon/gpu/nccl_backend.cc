#include "daemon/gpu/nccl_backend.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace collective::daemon::gpu {
namespace {

absl::StatusOr<ncclDataType_t> NcclType(v1::DataType dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_UINT8:
    case v1::DATA_TYPE_BOOL:  // 0 and 1: min and max are and and or
      return ncclUint8;
    case v1::DATA_TYPE_INT8:
      return ncclInt8;
    case v1::DATA_TYPE_INT32:
      return ncclInt32;
    case v1::DATA_TYPE_INT64:
      return ncclInt64;
    case v1::DATA_TYPE_FLOAT16:
      return ncclFloat16;
    case v1::DATA_TYPE_BFLOAT16:
      return ncclBfloat16;
    case v1::DATA_TYPE_FLOAT32:
      return ncclFloat32;
    case v1::DATA_TYPE_FLOAT64:
      return ncclFloat64;
    default:
      return absl::UnimplementedError(
          absl::StrCat("NCCL cannot reduce ", DataTypeName(dtype), " tensors"));
  }
}

absl::StatusOr<ncclRedOp_t> NcclOp(v1::ReduceOp op) {
  switch (op) {
    case v1::REDUCE_OP_SUM:
      return ncclSum;
    case v1::REDUCE_OP_PRODUCT:
      return ncclProd;
    case v1::REDUCE_OP_MIN:
      return ncclMin;
    case v1::REDUCE_OP_MAX:
      return ncclMax;
    case v1::REDUCE_OP_AVERAGE:
      return ncclAvg;
    default:
      return absl::UnimplementedError(absl::StrCat("NCCL has no reduce op ", ReduceOpName(op)));
  }
}

}  // namespace

absl::Status NcclStatus(ncclResult_t result, absl::string_view what, ncclComm_t comm) {
  if (result == ncclSuccess) return absl::OkStatus();
  const char* last = comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  return absl::UnavailableError(absl::StrCat(
      what, ": ", ncclGetErrorString(result), last != nullptr && *last != '\0' ? " (" : "",
      last != nullptr ? last : "", last != nullptr && *last != '\0' ? ")" : ""));
}

NcclBackend::~NcclBackend() {
  while (!comms_.empty()) Destroy(comms_.begin()->first);
}

absl::StatusOr<std::string> NcclBackend::NewUniqueId() {
  ncclUniqueId id;
  RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<CommId> NcclBackend::Create(const CommunicatorSpec& spec) {
  const int count = static_cast<int>(spec.devices.size());
  std::vector<ncclComm_t> comms(spec.devices.size(), nullptr);
  if (spec.unique_id.empty()) {
    RETURN_IF_ERROR(
        NcclStatus(ncclCommInitAll(comms.data(), count, spec.devices.data()), "ncclCommInitAll"));
  } else {
    if (spec.unique_id.size() != sizeof(ncclUniqueId::internal)) {
      return absl::InvalidArgumentError("an NCCL unique id of the wrong size");
    }
    ncclUniqueId id;
    std::memcpy(id.internal, spec.unique_id.data(), sizeof(id.internal));
    absl::Status status = NcclStatus(ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < count && status.ok(); ++i) {
      if (const cudaError_t set = cudaSetDevice(spec.devices[i]); set != cudaSuccess) {
        status = absl::UnavailableError(
            absl::StrCat("cudaSetDevice(", spec.devices[i], "): ", cudaGetErrorString(set)));
        break;
      }
      status = NcclStatus(
          ncclCommInitRank(&comms[i], spec.ranks, id, spec.first_rank + i),
          absl::StrCat("ncclCommInitRank(rank ", spec.first_rank + i, " of ", spec.ranks, ")"));
    }
    const absl::Status ended = NcclStatus(ncclGroupEnd(), "ncclGroupEnd (communicator init)");
    if (status.ok()) status = ended;
    if (!status.ok()) {
      for (ncclComm_t comm : comms) {
        if (comm != nullptr) ncclCommAbort(comm);
      }
      return status;
    }
  }
  const CommId id = next_++;
  std::map<int, ncclComm_t>& ranks = comms_[id];
  for (int i = 0; i < count; ++i) ranks[spec.devices[i]] = comms[i];
  return id;
}

absl::StatusOr<ncclComm_t> NcclBackend::Rank(CommId comm, int device) const {
  auto it = comms_.find(comm);
  if (it != comms_.end()) {
    auto rank = it->second.find(device);
    if (rank != it->second.end()) return rank->second;
  }
  return absl::InternalError(
      absl::StrCat("NCCL communicator ", comm, " has no rank on CUDA device ", device));
}

absl::Status NcclBackend::AsyncError(CommId comm) {
  auto it = comms_.find(comm);
  if (it == comms_.end()) return absl::OkStatus();
  for (const auto& [device, rank] : it->second) {
    ncclResult_t async = ncclSuccess;
    RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(rank, &async), "ncclCommGetAsyncError", rank));
    RETURN_IF_ERROR(NcclStatus(async, absl::StrCat("CUDA device ", device), rank));
  }
  return absl::OkStatus();
}

void NcclBackend::Abort(CommId comm) {
  auto it = comms_.find(comm);
  if (it == comms_.end()) return;
  for (const auto& [device, rank] : it->second) {
    if (absl::Status aborted = NcclStatus(ncclCommAbort(rank), "ncclCommAbort"); !aborted.ok()) {
      log::Nccl().warn("device {}: {}", device, aborted.message());
    }
  }
  comms_.erase(it);
}

void NcclBackend::Destroy(CommId comm) {
  auto it = comms_.find(comm);
  if (it == comms_.end()) return;
  for (const auto& [device, rank] : it->second) {
    if (absl::Status destroyed = NcclStatus(ncclCommDestroy(rank), "ncclCommDestroy");
        !destroyed.ok()) {
      log::Nccl().warn("device {}: {}", device, destroyed.message());
    }
  }
  comms_.erase(it);
}

absl::Status NcclBackend::AllReduce(CommId comm, int device, cudaStream_t stream, const void* send,
                                    void* recv, uint64_t count, v1::DataType dtype,
                                    v1::ReduceOp op) {
  ASSIGN_OR_RETURN(ncclComm_t rank, Rank(comm, device));
  ASSIGN_OR_RETURN(const ncclDataType_t type, NcclType(dtype));
  ASSIGN_OR_RETURN(const ncclRedOp_t nccl_op, NcclOp(op));
  return NcclStatus(ncclAllReduce(send, recv, count, type, nccl_op, rank, stream), "ncclAllReduce",
                    rank);
}

absl::Status NcclBackend::Broadcast(CommId comm, int device, cudaStream_t stream, const void* send,
                                    void* recv, uint64_t bytes, int root) {
  ASSIGN_OR_RETURN(ncclComm_t rank, Rank(comm, device));
  return NcclStatus(ncclBroadcast(send, recv, bytes, ncclUint8, root, rank, stream),
                    "ncclBroadcast", rank);
}

absl::Status NcclBackend::Reduce(CommId comm, int device, cudaStream_t stream, const void* send,
                                 void* recv, uint64_t count, v1::DataType dtype, v1::ReduceOp op,
                                 int root) {
  ASSIGN_OR_RETURN(ncclComm_t rank, Rank(comm, device));
  ASSIGN_OR_RETURN(const ncclDataType_t type, NcclType(dtype));
  ASSIGN_OR_RETURN(const ncclRedOp_t nccl_op, NcclOp(op));
  return NcclStatus(ncclReduce(send, recv, count, type, nccl_op, root, rank, stream), "ncclReduce",
                    rank);
}

absl::Status NcclBackend::Send(CommId comm, int device, cudaStream_t stream, const void* buffer,
                               uint64_t bytes, int peer) {
  ASSIGN_OR_RETURN(ncclComm_t rank, Rank(comm, device));
  return NcclStatus(ncclSend(buffer, bytes, ncclUint8, peer, rank, stream), "ncclSend", rank);
}

absl::Status NcclBackend::Recv(CommId comm, int device, cudaStream_t stream, void* buffer,
                               uint64_t bytes, int peer) {
  ASSIGN_OR_RETURN(ncclComm_t rank, Rank(comm, device));
  return NcclStatus(ncclRecv(buffer, bytes, ncclUint8, peer, rank, stream), "ncclRecv", rank);
}

}  // namespace collective::daemon::gpu
