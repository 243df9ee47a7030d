#include "collective/client.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_core.h"
#include "client/cuda_driver.h"
#include "common/clock.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "shm/segment_layout.h"

namespace collective {
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
      shape_(std::move(other.shape_)),
      received_splits_(std::move(other.received_splits_)) {}

Result& Result::operator=(Result&& other) noexcept {
  if (this != &other) {
    Release();
    core_ = std::move(other.core_);
    request_id_ = other.request_id_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
    received_splits_ = std::move(other.received_splits_);
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

absl::StatusOr<Buffer> Client::TryAllocate(size_t bytes) {
  ASSIGN_OR_RETURN(const uint64_t offset, core_->TryAllocate(bytes));
  return Buffer(core_, core_->arena() + offset, bytes, offset);
}

uint64_t Client::arena_bytes() const { return core_->arena_bytes(); }

uint64_t Client::arena_free_bytes() const { return core_->ArenaFreeBytes(); }

bool Client::InArena(const void* data, size_t bytes) const {
  return core_->ArenaOffset(data, bytes).has_value();
}

uint64_t Client::copied_out_bytes() const {
  return copied_out_bytes_.load(std::memory_order_relaxed);
}

bool Client::Poll(Handle handle) { return core_->Poll(handle); }

bool Client::daemon_gpu_path() const { return core_->daemon_gpu_path(); }

absl::Status Client::CudaDriverStatus() { return internal::cuda::LoadDriver().status(); }

absl::StatusOr<Result> Client::Wait(Handle handle, absl::Duration timeout) {
  ASSIGN_OR_RETURN(internal::FinishedRequest finished, core_->Wait(handle, timeout));
  const shm::CompletionRecord& record = finished.record;
  const uint64_t limit = core_->results_bytes();
  const bool on_device = (record.flags & shm::kRecordDeviceResult) != 0;
  const bool in_output = (record.flags & shm::kRecordResultInOutput) != 0;
  if (in_output && (finished.output == nullptr || record.result_bytes > finished.output_capacity)) {
    return absl::InternalError(absl::StrCat("collectived says it wrote the result of request ",
                                            handle, " into an output the request did not name"));
  }
  if ((!on_device && !in_output &&
       (record.result_offset > limit || record.result_bytes > limit - record.result_offset)) ||
      (record.aux_count > 0 &&
       (record.aux_offset > limit || record.aux_count > (limit - record.aux_offset) / 8))) {
    return absl::InternalError(absl::StrCat("collectived placed the result of request ", handle,
                                            " outside the result segment"));
  }
  Result result;
  result.request_id_ = handle;
  result.bytes_ = record.result_bytes;
  result.dtype_ = finished.dtype;
  result.shape_ = std::move(finished.shape);
  if (!result.shape_.empty()) result.shape_[0] = record.result_dim0;
  if (record.aux_count > 0) {
    const auto* splits = reinterpret_cast<const int64_t*>(core_->results() + record.aux_offset);
    result.received_splits_.assign(splits, splits + record.aux_count);
  }
  if (on_device) {
    // In the CUDA output; the core made its stream wait for it. Only the
    // received splits (alltoall) were in the result segment.
    if (record.aux_count > 0) core_->Release(handle, sizeof(int64_t) * record.aux_count);
    result.data_ = finished.output;
    return result;
  }
  if (in_output) {
    // The daemon wrote it into the output in our arena; it holds nothing.
    result.data_ = finished.output;
    return result;
  }
  const std::byte* view = core_->results() + record.result_offset;
  if (finished.output == nullptr) {
    result.core_ = core_;
    result.data_ = view;
    return result;
  }
  if (record.result_bytes > finished.output_capacity) {
    core_->Release(handle, record.result_bytes);
    return absl::InternalError(absl::StrCat("the result of request ", handle, " has ",
                                            record.result_bytes, " bytes; the output holds ",
                                            finished.output_capacity));
  }
  internal::Span copy_out;
  const bool timed = core_->timeline_active();
  if (timed) copy_out.start_ns = MonotonicNanos();
  std::memcpy(finished.output, view, record.result_bytes);
  if (timed) copy_out.end_ns = MonotonicNanos();
  copied_out_bytes_.fetch_add(record.result_bytes, std::memory_order_relaxed);
  core_->Release(handle, record.result_bytes, copy_out);
  result.data_ = finished.output;
  return result;
}

bool ProcessSet::included(int global_rank) const { return rank_of(global_rank) >= 0; }

int ProcessSet::rank_of(int global_rank) const {
  const auto it = std::lower_bound(ranks.begin(), ranks.end(), global_rank);
  return it != ranks.end() && *it == global_rank ? static_cast<int>(it - ranks.begin()) : -1;
}

absl::Status Client::CheckMember(int32_t process_set) const {
  ASSIGN_OR_RETURN(const ProcessSet set, core_->FindProcessSet(process_set));
  if (set.included(rank())) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("rank ", rank(), " is not a member of process set ", process_set));
}

std::vector<ProcessSet> Client::ProcessSets() const { return core_->ProcessSets(); }

absl::StatusOr<int> Client::ProcessSetRank(int32_t id) const {
  RETURN_IF_ERROR(CheckMember(id));
  ASSIGN_OR_RETURN(const ProcessSet set, core_->FindProcessSet(id));
  return set.rank_of(rank());
}

absl::StatusOr<int> Client::ProcessSetSize(int32_t id) const {
  ASSIGN_OR_RETURN(const ProcessSet set, core_->FindProcessSet(id));
  return set.size();
}

absl::StatusOr<bool> Client::ProcessSetIncluded(int32_t id) const {
  ASSIGN_OR_RETURN(const ProcessSet set, core_->FindProcessSet(id));
  return set.included(rank());
}

absl::Status Client::RegisterDeviceMemory(const void* device_pointer) {
  return core_->RegisterDeviceMemory(device_pointer);
}

absl::Status Client::UnregisterDeviceMemory(const void* device_pointer) {
  return core_->UnregisterDeviceMemory(device_pointer);
}

absl::Status Client::StartTimeline(const std::string& path, bool mark_cycles) {
  v1::TimelineRequest request;
  request.set_action(v1::TimelineRequest::ACTION_START);
  request.set_path(path);
  request.set_mark_cycles(mark_cycles);
  return core_->Timeline(request).status();
}

absl::Status Client::StopTimeline() {
  v1::TimelineRequest request;
  request.set_action(v1::TimelineRequest::ACTION_STOP);
  return core_->Timeline(request).status();
}

}  // namespace collective
