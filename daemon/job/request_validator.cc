#include "daemon/job/request_validator.h"

#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/reduce_op_check.h"
#include "common/tensor_shape.h"
#include "daemon/exec/reduce_kernels.h"

namespace collective::daemon::job {
namespace {

std::string Describe(const v1::TensorRequest& request, uint32_t max_name_bytes) {
  // Quote at most a bounded prefix (the name itself may be the problem), cut
  // on a character boundary: the message must stay valid UTF-8 to reach the
  // client at all.
  size_t shown = std::min<size_t>(request.name().size(), std::min<uint32_t>(max_name_bytes, 128));
  while (shown < request.name().size() && shown > 0 &&
         (static_cast<unsigned char>(request.name()[shown]) & 0xc0) == 0x80) {
    --shown;
  }
  std::string name = request.name().substr(0, shown);
  for (char& c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return absl::StrCat("request ", request.request_id(), " ('", name,
                      shown < request.name().size() ? "...'" : "'", ")");
}

absl::Status CheckScale(const char* field, bool present, double value, v1::DataType dtype) {
  if (!present || value == 1.0) return absl::OkStatus();
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", value, " is not a finite number"));
  }
  if (dtype == v1::DATA_TYPE_BOOL) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be 1 for bool tensors"));
  }
  return absl::OkStatus();
}

bool IsControl(v1::Collective collective) {
  return collective == v1::COLLECTIVE_BARRIER || collective == v1::COLLECTIVE_JOIN ||
         collective == v1::COLLECTIVE_ADD_PROCESS_SET ||
         collective == v1::COLLECTIVE_REMOVE_PROCESS_SET;
}

// A send names its destination and a receive its source (peer_rank, within
// the process set: the engine checks it against the set's size), and both a
// tag. A receive's input is never read: it only describes what arrives.
absl::Status CheckMessage(const v1::TensorRequest& request) {
  if (!IsPointToPoint(request.collective())) {
    if (request.peer_rank() != 0 || request.tag() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer_rank and tag apply to send and receive, not to ",
                       CollectiveName(request.collective())));
    }
    return absl::OkStatus();
  }
  if (request.peer_rank() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer rank ", request.peer_rank(), " is negative"));
  }
  if (request.tag() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("tag ", request.tag(), " is negative"));
  }
  if (request.collective() == v1::COLLECTIVE_RECV && request.offset() != 0) {
    return absl::InvalidArgumentError(
        "a receive has no input: its offset must be 0 (its dtype and shape describe what it "
        "receives)");
  }
  if (request.collective() == v1::COLLECTIVE_SEND && request.has_output_offset()) {
    return absl::InvalidArgumentError("a send has no output: output_offset applies to receives");
  }
  return absl::OkStatus();
}

bool IsReduction(v1::Collective collective) {
  return collective == v1::COLLECTIVE_ALLREDUCE || collective == v1::COLLECTIVE_REDUCESCATTER ||
         collective == v1::COLLECTIVE_REDUCE;
}

bool IsRooted(v1::Collective collective) {
  return collective == v1::COLLECTIVE_REDUCE || collective == v1::COLLECTIVE_GATHER ||
         collective == v1::COLLECTIVE_SCATTER;
}

// The bytes a scatter delivers to this rank: receive_rows rows of the
// input's trailing dimensions. Nullopt when that overflows.
std::optional<uint64_t> ScatterBytes(const v1::TensorRequest& request) {
  uint64_t row = ElementSize(request.dtype());
  for (int i = 1; i < request.shape_size(); ++i) {
    if (__builtin_mul_overflow(row, static_cast<uint64_t>(request.shape(i)), &row)) {
      return std::nullopt;
    }
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(row, static_cast<uint64_t>(request.receive_rows()), &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

// Scatter: the rows this rank receives.
absl::Status CheckReceiveRows(const v1::TensorRequest& request) {
  if (request.collective() != v1::COLLECTIVE_SCATTER) {
    if (request.receive_rows() == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("receive_rows applies only to scatter, not to ",
                                                   CollectiveName(request.collective())));
  }
  if (request.receive_rows() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("receive_rows ", request.receive_rows(), " is negative"));
  }
  if (!ScatterBytes(request).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("receive_rows ", request.receive_rows(), " is more rows of shape ",
                     ShapeString(ShapeOf(request.shape())), " than a tensor can hold"));
  }
  return absl::OkStatus();
}

absl::Status CheckName(const std::string& name, const RequestLimits& limits) {
  if (name.empty()) return absl::InvalidArgumentError("the tensor name is empty");
  if (name.size() > limits.max_name_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the tensor name has ", name.size(),
                                                   " bytes; the limit is ", limits.max_name_bytes));
  }
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("the tensor name contains a control character");
    }
  }
  return absl::OkStatus();
}

// Barrier, join and process-set changes carry no data.
absl::Status CheckControl(const v1::TensorRequest& request) {
  const std::string what = CollectiveName(request.collective());
  if (request.length() != 0 || request.shape_size() != 0 ||
      request.memory() != v1::MEMORY_KIND_HOST || request.has_device_input() ||
      request.has_device_output()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " carries no tensor data"));
  }
  if (request.group_id() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " cannot be part of a group"));
  }
  const bool changes_sets = request.collective() == v1::COLLECTIVE_ADD_PROCESS_SET ||
                            request.collective() == v1::COLLECTIVE_REMOVE_PROCESS_SET;
  if (changes_sets && request.process_set_id() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is a collective of the global process set (id 0)"));
  }
  if (request.collective() == v1::COLLECTIVE_ADD_PROCESS_SET &&
      request.process_set_ranks_size() == 0) {
    return absl::InvalidArgumentError("a process set needs at least one rank");
  }
  return absl::OkStatus();
}

absl::Status CheckOpAndScales(const v1::TensorRequest& request) {
  const v1::Collective collective = request.collective();
  const v1::DataType dtype = request.dtype();
  if (!v1::AdasumScope_IsValid(request.adasum_scope())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown Adasum scope ", static_cast<int>(request.adasum_scope())));
  }
  if (!IsReduction(collective)) {
    if (request.adasum_scope() != v1::ADASUM_SCOPE_RANKS) {
      return absl::InvalidArgumentError(
          absl::StrCat("an Adasum scope applies to allreduce, not ", CollectiveName(collective)));
    }
    if (request.has_prescale() && request.prescale() != 1.0) {
      return absl::InvalidArgumentError(
          absl::StrCat("prescale applies to allreduce, reducescatter and reduce, not ",
                       CollectiveName(collective)));
    }
    if (request.has_postscale() && request.postscale() != 1.0) {
      return absl::InvalidArgumentError(
          absl::StrCat("postscale applies to allreduce, reducescatter and reduce, not ",
                       CollectiveName(collective)));
    }
    return absl::OkStatus();
  }
  const v1::ReduceOp op = request.op();
  if (!v1::ReduceOp_IsValid(op) || op == v1::REDUCE_OP_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat("unknown reduce op ", ReduceOpName(op)));
  }
  if (op == v1::REDUCE_OP_ADASUM && collective != v1::COLLECTIVE_ALLREDUCE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the adasum reduce op applies to allreduce, not ", CollectiveName(collective)));
  }
  // What libcollective checks at the call too, with the same texts.
  if (absl::Status status = CheckReduceOp(op, dtype, request.adasum_scope()); !status.ok()) {
    return status;
  }
  if (op == v1::REDUCE_OP_ADASUM) {
    if (request.memory() != v1::MEMORY_KIND_HOST) {
      return absl::UnimplementedError(
          "the adasum reduce op is implemented for host tensors only; copy a CUDA tensor to the "
          "host to combine it with Adasum");
    }
  } else if (collective == v1::COLLECTIVE_REDUCESCATTER && op != v1::REDUCE_OP_SUM &&
             op != v1::REDUCE_OP_AVERAGE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reducescatter supports the sum and average reduce ops, not ", ReduceOpName(op)));
  } else if (const v1::ReduceOp kernel_op = op == v1::REDUCE_OP_AVERAGE ? v1::REDUCE_OP_SUM : op;
             !exec::IsReducible(dtype, kernel_op)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce op ", ReduceOpName(op), " is not defined for ", DataTypeName(dtype), " tensors"));
  }
  if (absl::Status status =
          CheckScale("prescale", request.has_prescale(), request.prescale(), dtype);
      !status.ok()) {
    return status;
  }
  return CheckScale("postscale", request.has_postscale(), request.postscale(), dtype);
}

bool IsNcclReducible(v1::DataType dtype) {
  return dtype != v1::DATA_TYPE_UINT16 && dtype != v1::DATA_TYPE_INT16;
}

// Where the tensor lives: the client's arena, or registered CUDA memory.
absl::Status CheckMemory(const v1::TensorRequest& request, const RequestLimits& limits) {
  if (!v1::MemoryKind_IsValid(request.memory())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown memory kind ", static_cast<int>(request.memory())));
  }
  if (request.memory() == v1::MEMORY_KIND_HOST) {
    if (request.has_device_input() || request.has_device_output()) {
      return absl::InvalidArgumentError("device_input and device_output apply to CUDA tensors");
    }
    return absl::OkStatus();
  }
  const v1::Collective collective = request.collective();
  if (!limits.cuda) {
    return absl::UnimplementedError(
        "CUDA tensors need a collectived built with CUDA and NCCL; this one was built without "
        "them");
  }
  if (request.offset() != 0) {
    return absl::InvalidArgumentError(
        "offset applies to host tensors; a CUDA tensor's input is device_input");
  }
  // An empty range needs no allocation (allocation 0 names none).
  if (request.device_input().allocation_id() == 0 && request.length() > 0) {
    return absl::InvalidArgumentError(
        "a CUDA tensor needs device_input in a registered CUDA allocation");
  }
  // An allreduce's, broadcast's, receive's or allgather's result holds at
  // least the rank's own input (a receive's describes what arrives); an
  // alltoall's, reducescatter's, scatter's share may be empty, and only the
  // root of a reduce or gather has a result (GpuExecutor::Check).
  const bool whole_result = collective == v1::COLLECTIVE_ALLREDUCE ||
                            collective == v1::COLLECTIVE_BROADCAST ||
                            collective == v1::COLLECTIVE_RECV;
  const bool holds_input = whole_result || collective == v1::COLLECTIVE_ALLGATHER;
  if (request.device_output().allocation_id() == 0 &&
      (request.device_output().bytes() > 0 || (holds_input && request.length() > 0))) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CUDA tensor needs device_output (", CollectiveName(collective),
                     " writes each rank's result into it; it may be the input)"));
  }
  if (whole_result && request.device_output().bytes() < request.length()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_output holds ", request.device_output().bytes(), " bytes; the ",
                     CollectiveName(collective), " result needs ", request.length()));
  }
  if (IsReduction(collective) && !IsNcclReducible(request.dtype())) {
    return absl::UnimplementedError(absl::StrCat(
        "NCCL cannot reduce ", DataTypeName(request.dtype()), " tensors; reduce them on the host"));
  }
  return absl::OkStatus();
}

// An output in the client's own arena: the daemon writes the result there,
// so the whole range must lie inside that arena and nowhere else.
absl::Status CheckOutputInArena(const v1::TensorRequest& request, const RequestLimits& limits) {
  if (!request.has_output_offset()) return absl::OkStatus();
  if (request.memory() != v1::MEMORY_KIND_HOST) {
    return absl::InvalidArgumentError(
        "output_offset applies to host tensors; a CUDA tensor's output is device_output");
  }
  // Collectives whose result is at most as long as the input on every rank
  // (the range checked is the input's length, which holds a reducescatter
  // rank's block; the reducescatter op checks the block against the input),
  // and scatter, whose result is this rank's rows.
  const v1::Collective collective = request.collective();
  if (collective != v1::COLLECTIVE_ALLREDUCE && collective != v1::COLLECTIVE_BROADCAST &&
      collective != v1::COLLECTIVE_REDUCESCATTER && collective != v1::COLLECTIVE_REDUCE &&
      collective != v1::COLLECTIVE_SCATTER && collective != v1::COLLECTIVE_RECV) {
    return absl::InvalidArgumentError(
        absl::StrCat("output_offset applies only to allreduce, broadcast, reducescatter, "
                     "reduce, scatter and receive, not to ",
                     CollectiveName(collective)));
  }
  // A scatter's result is this rank's rows (CheckReceiveRows vouched for
  // their size); the others' is the input's size.
  const bool scatter = collective == v1::COLLECTIVE_SCATTER;
  const uint64_t bytes = scatter ? ScatterBytes(request).value_or(0) : request.length();
  uint64_t end = 0;
  if (__builtin_add_overflow(request.output_offset(), bytes, &end) || end > limits.arena_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("output_offset ", request.output_offset(), " + ",
                     scatter ? "the bytes of receive_rows " : "length ", bytes,
                     " lies outside the client's arena of ", limits.arena_bytes,
                     " bytes (the daemon writes a result only into the client's own arena)"));
  }
  // Allreduce, reduce and broadcast write their result piece by piece while
  // the input's later pieces are still to be read: an output over the input
  // is the input itself (in place) or nothing of it.
  const bool piecewise = collective == v1::COLLECTIVE_ALLREDUCE ||
                         collective == v1::COLLECTIVE_REDUCE ||
                         collective == v1::COLLECTIVE_BROADCAST;
  if (piecewise && bytes > 0 && request.output_offset() != request.offset() &&
      request.output_offset() < request.offset() + request.length() && request.offset() < end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output_offset ", request.output_offset(), " + length ", bytes,
        " partly overlaps the input at offset ", request.offset(),
        ": the result would overwrite input not yet reduced; an output over the input must "
        "start where the input does (in place)"));
  }
  return absl::OkStatus();
}

absl::Status CheckData(const v1::TensorRequest& request, const RequestLimits& limits) {
  const v1::Collective collective = request.collective();
  const v1::DataType dtype = request.dtype();
  if (ElementSize(dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", DataTypeName(dtype)));
  }
  if (absl::Status status = CheckOpAndScales(request); !status.ok()) return status;
  if (absl::Status status = CheckMessage(request); !status.ok()) return status;
  if (absl::Status status = CheckMemory(request, limits); !status.ok()) return status;

  if (request.shape_size() > static_cast<int>(limits.max_dims)) {
    return absl::InvalidArgumentError(absl::StrCat("the shape has ", request.shape_size(),
                                                   " dimensions; the limit is ", limits.max_dims));
  }
  const bool needs_rows =
      collective == v1::COLLECTIVE_ALLGATHER || collective == v1::COLLECTIVE_ALLTOALL ||
      collective == v1::COLLECTIVE_REDUCESCATTER || collective == v1::COLLECTIVE_GATHER ||
      collective == v1::COLLECTIVE_SCATTER;
  if (needs_rows && request.shape_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveName(collective), " needs a tensor of at least one dimension (its rows)"));
  }
  const auto elements = NumElements(ShapeOf(request.shape()));
  if (!elements.ok()) return absl::InvalidArgumentError(elements.status().message());
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(*elements, ElementSize(dtype), &bytes) || bytes != request.length()) {
    return absl::InvalidArgumentError(
        absl::StrCat("length ", request.length(), " does not match shape ",
                     ShapeString(ShapeOf(request.shape())), " of ", DataTypeName(dtype), " (",
                     *elements, " elements of ", ElementSize(dtype), " bytes)"));
  }
  uint64_t end = 0;
  const bool in_arena =
      request.memory() == v1::MEMORY_KIND_HOST && collective != v1::COLLECTIVE_RECV;
  if (in_arena && (__builtin_add_overflow(request.offset(), request.length(), &end) ||
                   end > limits.arena_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", request.offset(), " + length ", request.length(),
                     " lies outside the client's arena of ", limits.arena_bytes, " bytes"));
  }
  if (absl::Status status = CheckReceiveRows(request); !status.ok()) return status;
  if (absl::Status status = CheckOutputInArena(request, limits); !status.ok()) return status;

  if (request.splits_size() != 0) {
    if (collective != v1::COLLECTIVE_ALLTOALL) {
      return absl::InvalidArgumentError("splits apply only to alltoall");
    }
    if (request.shape_size() == 0) {
      return absl::InvalidArgumentError("splits need a tensor of at least one dimension");
    }
    // Each split is at most the first dimension and the running total never
    // wraps: the alltoall op sizes its copies from these numbers.
    for (int64_t split : request.splits()) {
      if (split < 0) {
        return absl::InvalidArgumentError(absl::StrCat("split ", split, " is negative"));
      }
    }
    int64_t total = 0;
    for (int64_t split : request.splits()) {
      if (split > request.shape(0) || __builtin_add_overflow(total, split, &total)) {
        return absl::InvalidArgumentError(
            absl::StrCat("split ", split, " exceeds the first dimension ", request.shape(0)));
      }
    }
    if (total != request.shape(0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the splits add up to ", total, " rows but the first dimension is ", request.shape(0)));
    }
  }
  if ((collective == v1::COLLECTIVE_BROADCAST || IsRooted(collective)) && request.root_rank() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("root rank ", request.root_rank(), " is negative"));
  }
  if (request.group_id() != 0) {
    if (collective != v1::COLLECTIVE_ALLREDUCE && collective != v1::COLLECTIVE_ALLGATHER &&
        collective != v1::COLLECTIVE_REDUCESCATTER) {
      return absl::InvalidArgumentError(
          absl::StrCat("only allreduce, allgather and reducescatter can be grouped, not ",
                       CollectiveName(collective)));
    }
    if (request.group_size() < 1 || request.group_size() > kMaxGroupSize) {
      return absl::InvalidArgumentError(absl::StrCat("group size ", request.group_size(),
                                                     " is outside [1, ", kMaxGroupSize, "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFields(const v1::TensorRequest& request, const RequestLimits& limits) {
  if (absl::Status status = CheckName(request.name(), limits); !status.ok()) return status;
  const v1::Collective collective = request.collective();
  if (!v1::Collective_IsValid(collective) || collective == v1::COLLECTIVE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown collective ", CollectiveName(collective)));
  }
  if (request.process_set_id() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("process set ", request.process_set_id(), " does not exist"));
  }
  return IsControl(collective) ? CheckControl(request) : CheckData(request, limits);
}

}  // namespace

absl::Status ValidateRequest(const v1::TensorRequest& request, const RequestLimits& limits) {
  absl::Status status = ValidateFields(request, limits);
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(Describe(request, limits.max_name_bytes), ": ",
                                                  status.message()));
}

}  // namespace collective::daemon::job
