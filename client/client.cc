#include "collective/client.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_core.h"
#include "common/dtype.h"
#include "common/status_macros.h"

namespace collective {
namespace {

absl::Status CheckRequest(absl::string_view name, const TensorView& input, size_t bytes,
                          const AllreduceOptions& options, const v1::Limits& limits) {
  if (name.empty()) return absl::InvalidArgumentError("the tensor name is empty");
  if (name.size() > limits.max_name_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor name of ", name.size(), " bytes exceeds the limit of ", limits.max_name_bytes()));
  }
  if (input.shape.size() > limits.max_dims()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has ", input.shape.size(),
                                                   " dimensions; the limit is ",
                                                   limits.max_dims()));
  }
  if (input.data == nullptr && bytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has no data"));
  }
  if (options.op == ReduceOp::kAdasum) {
    return absl::UnimplementedError("the adasum reduce op is not implemented");
  }
  if (input.dtype == DataType::kBool && options.op != ReduceOp::kMin &&
      options.op != ReduceOp::kMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': bool tensors support only the min and max reduce ops"));
  }
  return absl::OkStatus();
}

}  // namespace

size_t DataTypeSize(DataType dtype) {
  // The public enum carries the wire values (see types.h).
  return ElementSize(static_cast<v1::DataType>(dtype));
}

absl::StatusOr<size_t> TensorView::bytes() const {
  const size_t element = DataTypeSize(dtype);
  if (element == 0) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", static_cast<int32_t>(dtype)));
  }
  size_t total = element;
  for (int64_t dim : shape) {
    if (dim < 0) return absl::InvalidArgumentError(absl::StrCat("negative dimension ", dim));
    if (__builtin_mul_overflow(total, static_cast<size_t>(dim), &total)) {
      return absl::InvalidArgumentError("the shape has more bytes than fit in size_t");
    }
  }
  return total;
}

Buffer::Buffer(Buffer&& other) noexcept
    : core_(std::move(other.core_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      offset_(other.offset_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    core_ = std::move(other.core_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    offset_ = other.offset_;
  }
  return *this;
}

Buffer::~Buffer() { Reset(); }

void Buffer::Reset() {
  if (core_ != nullptr) core_->Free(offset_);
  core_.reset();
  data_ = nullptr;
  size_ = 0;
}

Result::Result(Result&& other) noexcept
    : core_(std::move(other.core_)),
      request_id_(other.request_id_),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      dtype_(other.dtype_),
      shape_(std::move(other.shape_)) {}

Result& Result::operator=(Result&& other) noexcept {
  if (this != &other) {
    Release();
    core_ = std::move(other.core_);
    request_id_ = other.request_id_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
  }
  return *this;
}

Result::~Result() { Release(); }

void Result::Release() {
  if (core_ != nullptr) {
    core_->Release(request_id_, bytes_);
    core_.reset();
    data_ = nullptr;
  }
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  RETURN_IF_ERROR(options.ResolveFromEnvironment());
  Topology topology;
  ASSIGN_OR_RETURN(auto core, internal::ClientCore::Connect(options, &topology));
  return std::unique_ptr<Client>(new Client(std::move(core), topology));
}

Client::~Client() { (void)Close(); }

absl::Status Client::Close() { return core_->Leave(); }

absl::StatusOr<Buffer> Client::Allocate(size_t bytes) {
  ASSIGN_OR_RETURN(const uint64_t offset, core_->Allocate(bytes));
  return Buffer(core_, core_->arena() + offset, bytes, offset);
}

absl::StatusOr<Client::Handle> Client::AllreduceAsync(absl::string_view name,
                                                      const TensorView& input, void* output,
                                                      const AllreduceOptions& options) {
  ASSIGN_OR_RETURN_WITH(const size_t bytes, input.bytes(), absl::StrCat("tensor '", name, "'"));
  RETURN_IF_ERROR(CheckRequest(name, input, bytes, options, core_->limits()));

  uint64_t offset = 0;
  uint64_t staging = internal::ClientCore::kNoStaging;
  if (auto in_arena = core_->ArenaOffset(input.data, bytes)) {
    offset = *in_arena;  // zero-copy: the daemon reads the tensor where it is
  } else if (bytes > 0) {
    ASSIGN_OR_RETURN(staging, core_->Allocate(bytes));
    std::memcpy(core_->arena() + staging, input.data, bytes);
    offset = staging;
  }

  v1::TensorRequest request;
  request.set_name(std::string(name));
  request.set_collective(v1::COLLECTIVE_ALLREDUCE);
  request.set_op(static_cast<v1::ReduceOp>(options.op));
  request.set_dtype(static_cast<v1::DataType>(input.dtype));
  for (int64_t dim : input.shape) request.add_shape(dim);
  request.set_offset(offset);
  request.set_length(bytes);
  if (options.prescale != 1.0) request.set_prescale(options.prescale);
  if (options.postscale != 1.0) request.set_postscale(options.postscale);
  return core_->Submit(std::move(request), staging, output, input.dtype, input.shape);
}

absl::Status Client::Allreduce(absl::string_view name, const TensorView& input, void* output,
                               const AllreduceOptions& options) {
  ASSIGN_OR_RETURN(const Handle handle, AllreduceAsync(name, input, output, options));
  return Wait(handle).status();
}

bool Client::Poll(Handle handle) { return core_->Poll(handle); }

absl::StatusOr<Result> Client::Wait(Handle handle, absl::Duration timeout) {
  ASSIGN_OR_RETURN(internal::FinishedRequest finished, core_->Wait(handle, timeout));
  const shm::CompletionRecord& record = finished.record;
  if (record.result_offset > core_->results_bytes() ||
      record.result_bytes > core_->results_bytes() - record.result_offset) {
    return absl::InternalError(absl::StrCat("collectived placed the result of request ", handle,
                                            " outside the result segment"));
  }
  Result result;
  result.request_id_ = handle;
  result.bytes_ = record.result_bytes;
  result.dtype_ = finished.dtype;
  result.shape_ = std::move(finished.shape);
  if (!result.shape_.empty()) result.shape_[0] = record.result_dim0;
  const std::byte* view = core_->results() + record.result_offset;
  if (finished.output != nullptr) {
    std::memcpy(finished.output, view, record.result_bytes);
    core_->Release(handle, record.result_bytes);
    result.data_ = finished.output;
  } else {
    result.core_ = core_;
    result.data_ = view;
  }
  return result;
}

}  // namespace collective
