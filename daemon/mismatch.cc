#include "daemon/mismatch.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/tensor_shape.h"

namespace collective::daemon {
namespace {

int32_t RankOf(const Submission& submission) { return submission.client->topology.rank(); }

double Scale(bool present, double value) { return present ? value : 1.0; }

absl::Status Mismatch(const ReadyTensor& tensor, const std::string& what, const Submission& first,
                      const std::string& first_value, const Submission& other,
                      const std::string& other_value) {
  return absl::FailedPreconditionError(
      absl::StrCat("Mismatched ", what, " for '", tensor.name, "': rank ", RankOf(first), " sent ",
                   first_value, ", rank ", RankOf(other), " sent ", other_value));
}

}  // namespace

absl::Status CheckAgreement(const ReadyTensor& tensor) {
  const Submission& first = tensor.submissions.front();
  const v1::TensorRequest& a = first.request;
  for (const Submission& other : tensor.submissions) {
    const v1::TensorRequest& b = other.request;
    if (b.collective() != a.collective()) {
      return Mismatch(tensor, "collective operations", first, CollectiveName(a.collective()), other,
                      CollectiveName(b.collective()));
    }
    if (b.dtype() != a.dtype()) {
      return Mismatch(tensor, "data types", first, DataTypeName(a.dtype()), other,
                      DataTypeName(b.dtype()));
    }
    if (b.op() != a.op()) {
      return Mismatch(tensor, "reduce ops", first, ReduceOpName(a.op()), other,
                      ReduceOpName(b.op()));
    }
    if (!std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end())) {
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
  }
  return absl::OkStatus();
}

}  // namespace collective::daemon
