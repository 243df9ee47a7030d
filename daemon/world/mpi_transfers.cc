#include "daemon/world/mpi_transfers.h"

#include <algorithm>
#include <array>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "daemon/exec/reduce_kernels.h"
#include "daemon/world/world.h"

namespace collective::daemon::world {
namespace {

constexpr std::array<v1::ReduceOp, 4> kOps = {v1::REDUCE_OP_SUM, v1::REDUCE_OP_MIN,
                                              v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT};
constexpr int kFirstType = v1::DATA_TYPE_UINT8;
constexpr int kTypes = v1::DATA_TYPE_BOOL - v1::DATA_TYPE_UINT8 + 1;
// MPI counts are ints: larger transfers go in pieces of this many elements.
constexpr uint64_t kMaxCount = uint64_t{1} << 30;

size_t OpIndex(v1::ReduceOp op) {
  return static_cast<size_t>(std::find(kOps.begin(), kOps.end(), op) - kOps.begin());
}

// MPI's buffers reduced with this daemon's kernels, so that combining nodes
// follows exactly the rules of the local reduction (integers wrap, NaNs
// propagate as documented, bool is logical) — and does not depend on MPI's
// own operations, some of which (Open MPI 4.1's AVX component) saturate
// 8-bit sums.
template <int kType, size_t kOp>
void KernelReduce(void* in, void* inout, int* count, MPI_Datatype*) {
  const exec::ReduceSpec spec{.dtype = static_cast<v1::DataType>(kType), .op = kOps[kOp]};
  if (!exec::IsReducible(spec.dtype, spec.op)) return;  // refused before it gets here
  const void* inputs[] = {inout, in};
  exec::Reduce(spec, inputs, inout, static_cast<size_t>(*count));
}

// Per dtype: an MPI type of one element's bytes and an operation per op.
struct KernelOps {
  std::array<MPI_Datatype, kTypes> types = {};
  std::array<std::array<MPI_Op, kOps.size()>, kTypes> ops = {};
};

template <int kType, size_t... kOp>
void CreateOps(std::array<MPI_Op, kOps.size()>& ops, std::index_sequence<kOp...>) {
  (MPI_Op_create(&KernelReduce<kType, kOp>, /*commute=*/1, &ops[kOp]), ...);
}

template <int... kIndex>
void CreateAll(KernelOps& created, std::integer_sequence<int, kIndex...>) {
  (CreateOps<kFirstType + kIndex>(created.ops[kIndex], std::make_index_sequence<kOps.size()>()),
   ...);
}

// Created on first use, on the engine thread (the only one calling MPI),
// and kept until MPI_Finalize frees them.
const KernelOps& Kernels() {
  static const KernelOps ops = [] {
    KernelOps created;
    for (int index = 0; index < kTypes; ++index) {
      const auto dtype = static_cast<v1::DataType>(kFirstType + index);
      MPI_Type_contiguous(static_cast<int>(ElementSize(dtype)), MPI_BYTE, &created.types[index]);
      MPI_Type_commit(&created.types[index]);
    }
    CreateAll(created, std::make_integer_sequence<int, kTypes>());
    return created;
  }();
  return ops;
}

struct TypeAndOp {
  MPI_Datatype type;
  MPI_Op op;
};

absl::StatusOr<TypeAndOp> Reduction(v1::DataType dtype, v1::ReduceOp op) {
  const int index = static_cast<int>(dtype) - kFirstType;
  if (index < 0 || index >= kTypes || OpIndex(op) >= kOps.size() || !exec::IsReducible(dtype, op)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot combine ", DataTypeName(dtype), " tensors with ", ReduceOpName(op)));
  }
  return TypeAndOp{Kernels().types[index], Kernels().ops[index][OpIndex(op)]};
}

// `values` as MPI's int counts, or an error saying the transfer is too large
// for one MPI call.
absl::StatusOr<std::vector<int>> IntCounts(const std::vector<uint64_t>& values,
                                           absl::string_view what) {
  std::vector<int> counts;
  counts.reserve(values.size());
  for (uint64_t value : values) {
    if (value > static_cast<uint64_t>(INT_MAX)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " of ", value, " exceeds what one MPI call can count (", INT_MAX, ")"));
    }
    counts.push_back(static_cast<int>(value));
  }
  return counts;
}

// A committed type of one row, kept in `mpi` until the transfer completes.
absl::StatusOr<MPI_Datatype> RowType(uint64_t row_bytes, InFlightMpi& mpi) {
  if (row_bytes > static_cast<uint64_t>(INT_MAX)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a row of ", row_bytes, " bytes exceeds what one MPI datatype can describe"));
  }
  MPI_Datatype row = MPI_DATATYPE_NULL;
  MPI_Type_contiguous(static_cast<int>(row_bytes), MPI_BYTE, &row);
  MPI_Type_commit(&row);
  mpi.types.push_back(row);
  return row;
}

// Keeps the request a nonblocking call made (called after the call: the
// call's result first, then the request it filled in).
absl::Status Started(int error, const MPI_Request& request, absl::string_view what,
                     InFlightMpi& mpi) {
  if (absl::Status status = MpiStatus(error, what); !status.ok()) return status;
  mpi.requests.push_back(request);
  return absl::OkStatus();
}

}  // namespace

absl::Status StartAllreduce(MPI_Comm comm, void* data, uint64_t count, v1::DataType dtype,
                            v1::ReduceOp op, InFlightMpi& mpi) {
  auto reduction = Reduction(dtype, op);
  if (!reduction.ok()) return reduction.status();
  auto* bytes = static_cast<std::byte*>(data);
  const size_t element = ElementSize(dtype);
  for (uint64_t done = 0; done < count;) {
    const uint64_t piece = std::min(kMaxCount, count - done);
    MPI_Request request = MPI_REQUEST_NULL;
    const int error = MPI_Iallreduce(MPI_IN_PLACE, bytes + done * element, static_cast<int>(piece),
                                     reduction->type, reduction->op, comm, &request);
    if (absl::Status started = Started(error, request, "MPI_Iallreduce across nodes", mpi);
        !started.ok()) {
      return started;
    }
    done += piece;
  }
  return absl::OkStatus();
}

absl::Status StartReduce(MPI_Comm comm, void* data, uint64_t count, v1::DataType dtype,
                         v1::ReduceOp op, int root, InFlightMpi& mpi) {
  auto reduction = Reduction(dtype, op);
  if (!reduction.ok()) return reduction.status();
  int me = 0;
  MPI_Comm_rank(comm, &me);
  auto* bytes = static_cast<std::byte*>(data);
  const size_t element = ElementSize(dtype);
  for (uint64_t done = 0; done < count;) {
    const uint64_t piece = std::min(kMaxCount, count - done);
    std::byte* at = bytes + done * element;
    MPI_Request request = MPI_REQUEST_NULL;
    // The root reduces in place; the others' receive buffer is never used.
    const int error = me == root
                          ? MPI_Ireduce(MPI_IN_PLACE, at, static_cast<int>(piece), reduction->type,
                                        reduction->op, root, comm, &request)
                          : MPI_Ireduce(at, nullptr, static_cast<int>(piece), reduction->type,
                                        reduction->op, root, comm, &request);
    if (absl::Status started = Started(error, request, "MPI_Ireduce across nodes", mpi);
        !started.ok()) {
      return started;
    }
    done += piece;
  }
  return absl::OkStatus();
}

absl::Status StartReduceScatter(MPI_Comm comm, void* data, const std::vector<uint64_t>& counts,
                                v1::DataType dtype, v1::ReduceOp op, InFlightMpi& mpi) {
  auto reduction = Reduction(dtype, op);
  if (!reduction.ok()) return reduction.status();
  auto ints = IntCounts(counts, "a node's share of a reducescatter, in elements,");
  if (!ints.ok()) return ints.status();
  std::vector<int>& kept = mpi.int_arrays.emplace_back(std::move(*ints));
  MPI_Request request = MPI_REQUEST_NULL;
  const int error = MPI_Ireduce_scatter(MPI_IN_PLACE, data, kept.data(), reduction->type,
                                        reduction->op, comm, &request);
  return Started(error, request, "MPI_Ireduce_scatter across nodes", mpi);
}

absl::Status StartAllgather(MPI_Comm comm, void* data, uint64_t row_bytes,
                            const std::vector<uint64_t>& rows, const std::vector<uint64_t>& displs,
                            InFlightMpi& mpi) {
  auto counts = IntCounts(rows, "a node's rows of an allgather");
  if (!counts.ok()) return counts.status();
  auto offsets = IntCounts(displs, "the offset, in rows, of a node's part of an allgather");
  if (!offsets.ok()) return offsets.status();
  auto row = RowType(row_bytes, mpi);
  if (!row.ok()) return row.status();
  std::vector<int>& kept_counts = mpi.int_arrays.emplace_back(std::move(*counts));
  std::vector<int>& kept_displs = mpi.int_arrays.emplace_back(std::move(*offsets));
  MPI_Request request = MPI_REQUEST_NULL;
  const int error = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, kept_counts.data(),
                                    kept_displs.data(), *row, comm, &request);
  return Started(error, request, "MPI_Iallgatherv across nodes", mpi);
}

absl::Status StartGather(MPI_Comm comm, void* data, uint64_t row_bytes,
                         const std::vector<uint64_t>& rows, const std::vector<uint64_t>& displs,
                         int root, InFlightMpi& mpi) {
  auto counts = IntCounts(rows, "a node's rows of a gather");
  if (!counts.ok()) return counts.status();
  auto offsets = IntCounts(displs, "the offset, in rows, of a node's part of a gather");
  if (!offsets.ok()) return offsets.status();
  auto row = RowType(row_bytes, mpi);
  if (!row.ok()) return row.status();
  int me = 0;
  MPI_Comm_rank(comm, &me);
  std::vector<int>& kept_counts = mpi.int_arrays.emplace_back(std::move(*counts));
  std::vector<int>& kept_displs = mpi.int_arrays.emplace_back(std::move(*offsets));
  MPI_Request request = MPI_REQUEST_NULL;
  // The root's own block already lies in place; the others send theirs.
  const auto mine = static_cast<size_t>(me);
  const int error = me == root
                        ? MPI_Igatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, kept_counts.data(),
                                       kept_displs.data(), *row, root, comm, &request)
                        : MPI_Igatherv(static_cast<std::byte*>(data) + displs[mine] * row_bytes,
                                       kept_counts[mine], *row, nullptr, kept_counts.data(),
                                       kept_displs.data(), *row, root, comm, &request);
  return Started(error, request, "MPI_Igatherv across nodes", mpi);
}

absl::Status StartBroadcast(MPI_Comm comm, void* data, uint64_t bytes, int root, InFlightMpi& mpi) {
  auto* base = static_cast<std::byte*>(data);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t piece = std::min(kMaxCount, bytes - done);
    MPI_Request request = MPI_REQUEST_NULL;
    const int error =
        MPI_Ibcast(base + done, static_cast<int>(piece), MPI_BYTE, root, comm, &request);
    if (absl::Status started = Started(error, request, "MPI_Ibcast across nodes", mpi);
        !started.ok()) {
      return started;
    }
    done += piece;
  }
  return absl::OkStatus();
}

namespace {

// A message's pieces: each at most `chunk_bytes` (and what one MPI call can
// count), so that a large message streams as several requests.
template <typename Start>
absl::Status StartPieces(uint64_t bytes, uint64_t chunk_bytes, Start start) {
  const uint64_t most = std::min(kMaxCount, std::max<uint64_t>(chunk_bytes, 1));
  for (uint64_t done = 0; done < bytes || (bytes == 0 && done == 0);) {
    const uint64_t piece = std::min(most, bytes - done);
    if (absl::Status started = start(done, piece); !started.ok()) return started;
    done += piece;
    if (piece == 0) break;  // an empty message still pairs its two halves
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StartSend(MPI_Comm comm, int peer, const void* data, uint64_t bytes, int tag,
                       uint64_t chunk_bytes, InFlightMpi& mpi) {
  const auto* base = static_cast<const std::byte*>(data);
  return StartPieces(bytes, chunk_bytes, [&](uint64_t at, uint64_t piece) {
    MPI_Request request = MPI_REQUEST_NULL;
    const int error =
        MPI_Isend(base + at, static_cast<int>(piece), MPI_BYTE, peer, tag, comm, &request);
    return Started(error, request, "MPI_Isend of a message across nodes", mpi);
  });
}

absl::Status StartReceive(MPI_Comm comm, int peer, void* data, uint64_t bytes, int tag,
                          uint64_t chunk_bytes, InFlightMpi& mpi) {
  auto* base = static_cast<std::byte*>(data);
  return StartPieces(bytes, chunk_bytes, [&](uint64_t at, uint64_t piece) {
    MPI_Request request = MPI_REQUEST_NULL;
    const int error =
        MPI_Irecv(base + at, static_cast<int>(piece), MPI_BYTE, peer, tag, comm, &request);
    return Started(error, request, "MPI_Irecv of a message across nodes", mpi);
  });
}

namespace {

// One type per peer listing its blocks at their absolute addresses (so the
// buffer argument is MPI_BOTTOM); count 0 for a peer without rows.
absl::Status BlockTypes(MPI_Datatype row, const std::vector<std::vector<exec::RowBlock>>& blocks,
                        std::vector<int>& counts, std::vector<MPI_Datatype>& types,
                        InFlightMpi& mpi) {
  for (const std::vector<exec::RowBlock>& peer : blocks) {
    std::vector<uint64_t> lengths;
    std::vector<MPI_Aint> addresses;
    for (const exec::RowBlock& block : peer) {
      if (block.rows == 0) continue;
      lengths.push_back(block.rows);
      MPI_Aint address = 0;
      MPI_Get_address(block.address, &address);
      addresses.push_back(address);
    }
    if (lengths.empty()) {
      counts.push_back(0);
      types.push_back(row);
      continue;
    }
    auto ints = IntCounts(lengths, "a block of an alltoall, in rows,");
    if (!ints.ok()) return ints.status();
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Type_create_hindexed(static_cast<int>(ints->size()), ints->data(), addresses.data(), row,
                             &type);
    MPI_Type_commit(&type);
    mpi.types.push_back(type);
    counts.push_back(1);
    types.push_back(type);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StartExchange(MPI_Comm comm, uint64_t row_bytes,
                           const std::vector<std::vector<exec::RowBlock>>& send,
                           const std::vector<std::vector<exec::RowBlock>>& receive,
                           InFlightMpi& mpi) {
  auto row = RowType(row_bytes, mpi);
  if (!row.ok()) return row.status();
  std::vector<int>& send_counts = mpi.int_arrays.emplace_back();
  std::vector<int>& receive_counts = mpi.int_arrays.emplace_back();
  std::vector<int>& displs = mpi.int_arrays.emplace_back(send.size(), 0);
  std::vector<MPI_Datatype>& send_types = mpi.type_arrays.emplace_back();
  std::vector<MPI_Datatype>& receive_types = mpi.type_arrays.emplace_back();
  if (absl::Status built = BlockTypes(*row, send, send_counts, send_types, mpi); !built.ok()) {
    return built;
  }
  if (absl::Status built = BlockTypes(*row, receive, receive_counts, receive_types, mpi);
      !built.ok()) {
    return built;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  const int error =
      MPI_Ialltoallw(MPI_BOTTOM, send_counts.data(), displs.data(), send_types.data(), MPI_BOTTOM,
                     receive_counts.data(), displs.data(), receive_types.data(), comm, &request);
  return Started(error, request, "MPI_Ialltoallw across nodes", mpi);
}

}  // namespace collective::daemon::world
