#include "daemon/cross_node.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "daemon/reduce_kernels.h"
#include "daemon/world.h"

namespace collective::daemon {
namespace {

constexpr std::array<v1::ReduceOp, 4> kOps = {v1::REDUCE_OP_SUM, v1::REDUCE_OP_MIN,
                                              v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT};
constexpr int kFirstType = v1::DATA_TYPE_UINT8;
constexpr int kTypes = v1::DATA_TYPE_BOOL - v1::DATA_TYPE_UINT8 + 1;

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

}  // namespace

absl::Status AllreduceAcrossNodes(MPI_Comm comm, void* data, uint64_t count, v1::DataType dtype,
                                  v1::ReduceOp op) {
  const int index = static_cast<int>(dtype) - kFirstType;
  if (index < 0 || index >= kTypes || OpIndex(op) >= kOps.size() || !exec::IsReducible(dtype, op)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot combine ", DataTypeName(dtype), " tensors with ", ReduceOpName(op)));
  }
  const MPI_Datatype type = Kernels().types[index];
  const MPI_Op mpi_op = Kernels().ops[index][OpIndex(op)];
  // MPI counts are ints: large tensors go in pieces.
  constexpr uint64_t kMaxCount = uint64_t{1} << 30;
  auto* bytes = static_cast<std::byte*>(data);
  const size_t element = ElementSize(dtype);
  for (uint64_t done = 0; done < count;) {
    const uint64_t piece = std::min(kMaxCount, count - done);
    if (absl::Status status = MpiStatus(MPI_Allreduce(MPI_IN_PLACE, bytes + done * element,
                                                      static_cast<int>(piece), type, mpi_op, comm),
                                        "MPI_Allreduce across nodes");
        !status.ok()) {
      return status;
    }
    done += piece;
  }
  return absl::OkStatus();
}

}  // namespace collective::daemon
