#include "daemon/negotiation/mismatch.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/tensor_shape.h"
#include "daemon/job/process_sets.h"
#include "daemon/negotiation/message_matcher.h"

namespace collective::daemon::negotiation {
namespace {

int32_t RankOf(const Submission& submission) { return submission.rank; }

double Scale(bool present, double value) { return present ? value : 1.0; }

absl::Status Mismatch(const ReadyTensor& tensor, const std::string& what, const Submission& first,
                      const std::string& first_value, const Submission& other,
                      const std::string& other_value, absl::string_view why = "") {
  return absl::FailedPreconditionError(
      absl::StrCat("Mismatched ", what, " for '", tensor.name, "': rank ", RankOf(first), " sent ",
                   first_value, ", rank ", RankOf(other), " sent ", other_value, why));
}

bool SameTrailingDims(const v1::TensorRequest& a, const v1::TensorRequest& b) {
  return a.shape_size() == b.shape_size() &&
         std::equal(a.shape().begin() + std::min(a.shape_size(), 1), a.shape().end(),
                    b.shape().begin() + std::min(b.shape_size(), 1));
}

bool SameShape(const v1::TensorRequest& a, const v1::TensorRequest& b) {
  return std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end());
}

// Horovod's device names: a tensor is on the CPU (the arena) or a GPU.
std::string DeviceOf(const v1::TensorRequest& request) {
  return request.memory() == v1::MEMORY_KIND_CUDA ? "a GPU tensor" : "a CPU tensor";
}

// What the ranks must agree on about a tensor's group: how many tensors it
// holds, 0 for a tensor sent alone. Group ids are each client's own, and
// without one the size means nothing (the validator lets it through), so
// comparing the raw fields could find two tensors sent alone to differ.
uint32_t GroupSizeOf(const v1::TensorRequest& request) {
  return request.group_id() == 0 ? 0 : request.group_size();
}

std::string DescribeGroup(const v1::TensorRequest& request) {
  const uint32_t size = GroupSizeOf(request);
  if (size == 0) return "it alone";
  return absl::StrCat("it in a group of ", size, size == 1 ? " tensor" : " tensors");
}

std::vector<int32_t> SortedRanks(const v1::TensorRequest& request) {
  std::vector<int32_t> ranks(request.process_set_ranks().begin(),
                             request.process_set_ranks().end());
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// What every collective must agree on.
absl::Status CheckCommon(const ReadyTensor& tensor, const Submission& first,
                         const Submission& other) {
  const v1::TensorRequest& a = first.request;
  const v1::TensorRequest& b = other.request;
  if (b.collective() != a.collective()) {
    return Mismatch(tensor, "collective operations", first, CollectiveName(a.collective()), other,
                    CollectiveName(b.collective()));
  }
  if (b.memory() != a.memory()) {
    return Mismatch(tensor, "CPU and GPU tensors", first, DeviceOf(a), other, DeviceOf(b));
  }
  if (b.dtype() != a.dtype()) {
    return Mismatch(tensor, "data types", first, DataTypeName(a.dtype()), other,
                    DataTypeName(b.dtype()));
  }
  if (GroupSizeOf(a) != GroupSizeOf(b)) {
    return Mismatch(tensor, "groups", first, DescribeGroup(a), other, DescribeGroup(b));
  }
  return absl::OkStatus();
}

// Reductions: op, scale factors and the whole shape.
absl::Status CheckReduction(const ReadyTensor& tensor, const Submission& first,
                            const Submission& other) {
  const v1::TensorRequest& a = first.request;
  const v1::TensorRequest& b = other.request;
  if (b.op() != a.op()) {
    return Mismatch(tensor, "reduce ops", first, ReduceOpName(a.op()), other, ReduceOpName(b.op()));
  }
  if (b.adasum_scope() != a.adasum_scope()) {
    return Mismatch(tensor, "Adasum scopes", first, AdasumScopeName(a.adasum_scope()), other,
                    AdasumScopeName(b.adasum_scope()),
                    " (GPU tensors combine the nodes' sums, as Horovod's NCCL build does, host "
                    "tensors every rank: pass tensors on the same device on every rank)");
  }
  if (!SameShape(a, b)) {
    return Mismatch(tensor, absl::StrCat(CollectiveName(a.collective()), " tensor shapes"), first,
                    ShapeString(ShapeOf(a.shape())), other, ShapeString(ShapeOf(b.shape())));
  }
  const double a_pre = Scale(a.has_prescale(), a.prescale());
  const double b_pre = Scale(b.has_prescale(), b.prescale());
  if (a_pre != b_pre) {
    return Mismatch(tensor, "prescale factors", first, absl::StrCat(a_pre), other,
                    absl::StrCat(b_pre));
  }
  const double a_post = Scale(a.has_postscale(), a.postscale());
  const double b_post = Scale(b.has_postscale(), b.postscale());
  if (a_post != b_post) {
    return Mismatch(tensor, "postscale factors", first, absl::StrCat(a_post), other,
                    absl::StrCat(b_post));
  }
  return absl::OkStatus();
}

absl::Status CheckTrailingDims(const ReadyTensor& tensor, const Submission& first,
                               const Submission& other) {
  const v1::TensorRequest& a = first.request;
  const v1::TensorRequest& b = other.request;
  if (SameTrailingDims(a, b)) return absl::OkStatus();
  return Mismatch(tensor, absl::StrCat(CollectiveName(a.collective()), " tensor shapes"), first,
                  ShapeString(ShapeOf(a.shape())), other, ShapeString(ShapeOf(b.shape())),
                  " (every dimension but the first must match)");
}

// Reduce, gather and scatter: the root, then what the collective needs.
absl::Status CheckRooted(const ReadyTensor& tensor, const Submission& first,
                         const Submission& other) {
  const v1::TensorRequest& a = first.request;
  const v1::TensorRequest& b = other.request;
  if (b.root_rank() != a.root_rank()) {
    return Mismatch(tensor, absl::StrCat(CollectiveName(a.collective()), " root ranks"), first,
                    absl::StrCat(a.root_rank()), other, absl::StrCat(b.root_rank()));
  }
  if (a.collective() == v1::COLLECTIVE_REDUCE) return CheckReduction(tensor, first, other);
  return CheckTrailingDims(tensor, first, other);
}

// Scatter: the rows every rank receives add up to the root's rows. A root
// outside the set, or a set with joined ranks, is the op's to refuse.
absl::Status CheckScatterRows(const ReadyTensor& tensor) {
  if (tensor.has_joined_ranks()) return absl::OkStatus();
  const int32_t root = tensor.submissions.front().request.root_rank();
  const Submission* sender = nullptr;
  int64_t total = 0;
  std::vector<std::string> asked;
  for (const Submission& submission : tensor.submissions) {
    if (submission.set_rank == root) sender = &submission;
    const int64_t rows = submission.request.receive_rows();
    total = __builtin_add_overflow(total, rows, &total) ? INT64_MAX : total;
    asked.push_back(absl::StrCat(rows));
  }
  if (sender == nullptr) return absl::OkStatus();
  const int64_t has = sender->request.shape_size() > 0 ? sender->request.shape(0) : 0;
  if (total == has) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "Mismatched scatter rows for '", tensor.name, "': the ranks of process set ",
      tensor.process_set_id, " ask for [", absl::StrJoin(asked, ", "), "] rows, ",
      total == INT64_MAX ? std::string("more than a tensor holds") : absl::StrCat(total),
      " in all, but root rank ", RankOf(*sender), " sent ", has,
      " rows; the rows every rank receives must add up to the root's first dimension"));
}

absl::Status CheckPair(const ReadyTensor& tensor, const Submission& first,
                       const Submission& other) {
  if (absl::Status status = CheckCommon(tensor, first, other); !status.ok()) return status;
  const v1::TensorRequest& a = first.request;
  const v1::TensorRequest& b = other.request;
  switch (a.collective()) {
    case v1::COLLECTIVE_ALLREDUCE:
    case v1::COLLECTIVE_REDUCESCATTER:
      return CheckReduction(tensor, first, other);
    case v1::COLLECTIVE_ALLGATHER:
    case v1::COLLECTIVE_ALLTOALL:
      if (!SameTrailingDims(a, b)) {
        return Mismatch(tensor, absl::StrCat(CollectiveName(a.collective()), " tensor shapes"),
                        first, ShapeString(ShapeOf(a.shape())), other,
                        ShapeString(ShapeOf(b.shape())),
                        " (every dimension but the first must match)");
      }
      return absl::OkStatus();
    case v1::COLLECTIVE_BROADCAST:
      if (b.root_rank() != a.root_rank()) {
        return Mismatch(tensor, "broadcast root ranks", first, absl::StrCat(a.root_rank()), other,
                        absl::StrCat(b.root_rank()));
      }
      if (!SameShape(a, b)) {
        return Mismatch(tensor, "broadcast tensor shapes", first, ShapeString(ShapeOf(a.shape())),
                        other, ShapeString(ShapeOf(b.shape())));
      }
      return absl::OkStatus();
    case v1::COLLECTIVE_REDUCE:
    case v1::COLLECTIVE_GATHER:
    case v1::COLLECTIVE_SCATTER:
      return CheckRooted(tensor, first, other);
    case v1::COLLECTIVE_ADD_PROCESS_SET:
      if (SortedRanks(a) != SortedRanks(b)) {
        return Mismatch(tensor, "process sets to add", first, job::RanksString(SortedRanks(a)),
                        other, job::RanksString(SortedRanks(b)));
      }
      return absl::OkStatus();
    case v1::COLLECTIVE_REMOVE_PROCESS_SET:
      if (a.target_process_set_id() != b.target_process_set_id()) {
        return Mismatch(tensor, "process sets to remove", first,
                        absl::StrCat(a.target_process_set_id()), other,
                        absl::StrCat(b.target_process_set_id()));
      }
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

// A matched send and receive (message_matcher.h): the receive names the
// send's dtype and byte size; shapes may differ, as MPI's counts do.
absl::Status CheckMessage(const ReadyTensor& tensor) {
  const Submission& send = tensor.submissions[0];
  const Submission& receive = tensor.submissions[1];
  const v1::TensorRequest& a = send.request;
  const v1::TensorRequest& b = receive.request;
  if (a.dtype() == b.dtype() && a.length() == b.length() && a.memory() == b.memory()) {
    return absl::OkStatus();
  }
  const auto describe = [](const v1::TensorRequest& request) {
    return absl::StrCat(request.length(), " bytes (", DeviceOf(request), " of ",
                        DataTypeName(request.dtype()), " ", ShapeString(ShapeOf(request.shape())),
                        ")");
  };
  return absl::FailedPreconditionError(
      absl::StrCat("Mismatched send and receive of the ", tensor.name, ": rank ", send.rank,
                   " sends ", describe(a), ", rank ", receive.rank, " receives ", describe(b),
                   "; a receive must name the send's dtype and byte size"));
}

}  // namespace

absl::Status CheckAgreement(const ReadyTensor& tensor) {
  if (IsPointToPoint(tensor.request().collective())) return CheckMessage(tensor);
  const Submission& first = tensor.submissions.front();
  for (const Submission& other : tensor.submissions) {
    if (absl::Status status = CheckPair(tensor, first, other); !status.ok()) return status;
  }
  if (first.request.collective() == v1::COLLECTIVE_SCATTER) return CheckScatterRows(tensor);
  return absl::OkStatus();
}

absl::Status RefusedAfterJoin(v1::Collective collective, const std::string& name,
                              int32_t process_set_id, const std::vector<int32_t>& joined) {
  const std::string what = CarriesData(collective)
                               ? absl::StrCat(CollectiveName(collective), " of '", name, "'")
                               : std::string(CollectiveName(collective));
  return absl::FailedPreconditionError(absl::StrCat(
      what, " cannot run while ", joined.size() == 1 ? "rank " : "ranks ",
      absl::StrJoin(joined, ", "), " of process set ", process_set_id,
      joined.size() == 1 ? " has" : " have", " joined: after a join only allreduce carries on"));
}

absl::Status RefusedAfterJoin(const ReadyTensor& tensor) {
  std::vector<int32_t> joined;
  size_t next = 0;
  for (int32_t rank = 0; rank < tensor.set_size; ++rank) {
    if (next < tensor.submissions.size() && tensor.submissions[next].set_rank == rank) {
      ++next;
    } else {
      joined.push_back(rank);
    }
  }
  return RefusedAfterJoin(tensor.request().collective(), tensor.name, tensor.process_set_id,
                          joined);
}

}  // namespace collective::daemon::negotiation
