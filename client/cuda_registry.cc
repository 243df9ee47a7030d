#include "client/cuda_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace collective::internal {
namespace {

cuda::DevicePointer Address(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }

}  // namespace

absl::StatusOr<std::unique_ptr<CudaRegistry>> CudaRegistry::Create(const cuda::Driver& driver,
                                                                   uint32_t max_slots) {
  std::unique_ptr<CudaRegistry> registry(new CudaRegistry(driver, max_slots));
  RETURN_IF_ERROR(
      cuda::Check(driver, driver.CtxGetCurrent(&registry->context_), "cuCtxGetCurrent"));
  if (registry->context_ == nullptr) {
    return absl::FailedPreconditionError(
        "a CUDA tensor was passed, but the calling thread has no current CUDA context (call "
        "cudaSetDevice, or torch.cuda.set_device, first)");
  }
  RETURN_IF_ERROR(cuda::Check(driver, driver.CtxGetDevice(&registry->device_), "cuCtxGetDevice"));
  cuda::Uuid uuid{};
  RETURN_IF_ERROR(
      cuda::Check(driver, driver.DeviceGetUuid(&uuid, registry->device_), "cuDeviceGetUuid"));
  registry->uuid_.assign(uuid.bytes, sizeof(uuid.bytes));
  return registry;
}

CudaRegistry::~CudaRegistry() {
  for (const Slot& slot : events_) {
    driver_.EventDestroy(slot.ready);
    driver_.EventDestroy(slot.done);
  }
}

v1::RegisterCuda CudaRegistry::NewMessage() const {
  v1::RegisterCuda message;
  message.set_device_uuid(uuid_);
  return message;
}

absl::Status CudaRegistry::CheckContext() const {
  cuda::Context current = nullptr;
  RETURN_IF_ERROR(cuda::Check(driver_, driver_.CtxGetCurrent(&current), "cuCtxGetCurrent"));
  if (current != context_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the calling thread's current CUDA context is not the one this client uses (that of "
        "device ",
        device_, "): a client works with one device"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::DeviceRange> CudaRegistry::Locate(const void* pointer, uint64_t bytes,
                                                     v1::RegisterCuda& pending) {
  // An empty tensor (PyTorch gives it no memory: its pointer may be null)
  // names no allocation; the daemon reads and writes none of it.
  if (bytes == 0) return v1::DeviceRange();
  RETURN_IF_ERROR(CheckContext());
  cuda::DevicePointer base = 0;
  size_t size = 0;
  RETURN_IF_ERROR_WITH(
      cuda::Check(driver_, driver_.MemGetAddressRange(&base, &size, Address(pointer)),
                  "cuMemGetAddressRange"),
      "the tensor is not in CUDA device memory");
  int ordinal = -1;
  RETURN_IF_ERROR(cuda::Check(
      driver_, driver_.PointerGetAttribute(&ordinal, cuda::kAttributeDeviceOrdinal, base),
      "cuPointerGetAttribute(DEVICE_ORDINAL)"));
  if (ordinal != device_) {
    return absl::InvalidArgumentError(absl::StrCat("the tensor lies on CUDA device ", ordinal,
                                                   " but this client uses device ", device_,
                                                   " (one device per client)"));
  }
  const uint64_t offset = Address(pointer) - base;
  if (bytes > size - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("the tensor's ", bytes, " bytes run past the end of its CUDA allocation (",
                     size - offset, " bytes left from the tensor's start)"));
  }
  unsigned long long buffer_id = 0;
  RETURN_IF_ERROR(
      cuda::Check(driver_, driver_.PointerGetAttribute(&buffer_id, cuda::kAttributeBufferId, base),
                  "cuPointerGetAttribute(BUFFER_ID)"));
  auto known = allocations_.find(base);
  if (known == allocations_.end() || known->second.buffer_id != buffer_id) {
    cuda::IpcMemHandle handle{};
    RETURN_IF_ERROR_WITH(
        cuda::Check(driver_, driver_.IpcGetMemHandle(&handle, base), "cuIpcGetMemHandle"),
        "CUDA cannot share this allocation with collectived (allocate it with "
        "cudaMalloc, as PyTorch's caching allocator does; not cudaMallocAsync "
        "or managed memory)");
    if (known != allocations_.end()) {
      // Freed and allocated again at the same address: the daemon's old
      // mapping is stale.
      pending.add_unregister(known->second.allocation_id);
    }
    const Known added{buffer_id, next_allocation_++};
    v1::CudaAllocation* allocation = pending.add_allocations();
    allocation->set_allocation_id(added.allocation_id);
    allocation->set_ipc_handle(handle.reserved, sizeof(handle.reserved));
    allocation->set_bytes(size);
    known = allocations_.insert_or_assign(base, added).first;
  }
  v1::DeviceRange range;
  range.set_allocation_id(known->second.allocation_id);
  range.set_offset(offset);
  range.set_bytes(bytes);
  return range;
}

absl::Status CudaRegistry::Unregister(const void* pointer, v1::RegisterCuda& pending) {
  RETURN_IF_ERROR(CheckContext());
  cuda::DevicePointer base = 0;
  size_t size = 0;
  RETURN_IF_ERROR(cuda::Check(driver_, driver_.MemGetAddressRange(&base, &size, Address(pointer)),
                              "cuMemGetAddressRange"));
  auto known = allocations_.find(base);
  if (known == allocations_.end()) {
    return absl::NotFoundError("the allocation holding this pointer is not registered");
  }
  pending.add_unregister(known->second.allocation_id);
  allocations_.erase(known);
  return absl::OkStatus();
}

absl::Status CudaRegistry::Grow(v1::RegisterCuda& pending) {
  const size_t target = std::min<size_t>(events_.size() + kSlotsPerGrowth, max_slots_);
  if (target == events_.size()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", events_.size(),
                     " CUDA event slots are held by requests not yet waited for (the "
                     "daemon's limit of outstanding requests)"));
  }
  RETURN_IF_ERROR(CheckContext());
  std::vector<Slot> created;
  absl::Status status;
  while (events_.size() + created.size() < target && status.ok()) {
    Slot slot;
    for (cuda::Event* event : {&slot.ready, &slot.done}) {
      if (!status.ok()) break;
      status = cuda::Check(
          driver_, driver_.EventCreate(event, cuda::kEventDisableTiming | cuda::kEventInterprocess),
          "cuEventCreate(interprocess)");
    }
    if (status.ok()) created.push_back(slot);
    for (cuda::Event event : {slot.ready, slot.done}) {
      if (!status.ok() && event != nullptr) driver_.EventDestroy(event);
    }
  }
  std::vector<std::pair<cuda::IpcEventHandle, cuda::IpcEventHandle>> handles(created.size());
  for (size_t i = 0; i < created.size() && status.ok(); ++i) {
    status = cuda::Check(driver_, driver_.IpcGetEventHandle(&handles[i].first, created[i].ready),
                         "cuIpcGetEventHandle");
    if (status.ok()) {
      status = cuda::Check(driver_, driver_.IpcGetEventHandle(&handles[i].second, created[i].done),
                           "cuIpcGetEventHandle");
    }
  }
  if (!status.ok()) {
    for (const Slot& slot : created) {
      driver_.EventDestroy(slot.ready);
      driver_.EventDestroy(slot.done);
    }
    return status;
  }
  for (size_t i = 0; i < created.size(); ++i) {
    pending.add_ready_events(handles[i].first.reserved, sizeof(handles[i].first.reserved));
    pending.add_done_events(handles[i].second.reserved, sizeof(handles[i].second.reserved));
    events_.push_back(created[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<uint32_t, uint64_t>> CudaRegistry::AcquireSlot(v1::RegisterCuda& pending) {
  auto free = std::find_if(events_.begin(), events_.end(), [](const Slot& s) { return !s.held; });
  if (free == events_.end()) {
    RETURN_IF_ERROR(Grow(pending));
    free = std::find_if(events_.begin(), events_.end(), [](const Slot& s) { return !s.held; });
  }
  free->held = true;
  return std::pair(static_cast<uint32_t>(free - events_.begin()), next_sequence_++);
}

void CudaRegistry::ReleaseSlot(uint32_t slot) {
  if (slot < events_.size()) events_[slot].held = false;
}

size_t CudaRegistry::held_slots() const {
  return static_cast<size_t>(
      std::count_if(events_.begin(), events_.end(), [](const Slot& s) { return s.held; }));
}

absl::Status CudaRegistry::RecordReady(uint32_t slot, void* stream) {
  return cuda::Check(driver_,
                     driver_.EventRecord(events_[slot].ready, static_cast<cuda::Stream>(stream)),
                     "cuEventRecord (the input is ready)");
}

absl::Status CudaRegistry::WaitDone(uint32_t slot, void* stream) {
  return cuda::Check(
      driver_, driver_.StreamWaitEvent(static_cast<cuda::Stream>(stream), events_[slot].done, 0),
      "cuStreamWaitEvent (the daemon wrote the output)");
}

}  // namespace collective::internal
