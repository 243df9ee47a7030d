#include "daemon/gpu/ipc_handle_cache.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace collective::daemon::gpu {

IpcHandleCache::~IpcHandleCache() {
  for (auto& [handle, entry] : entries_) {
    if (absl::Status closed = opener_.CloseMemory(entry.device, entry.mapping.base); !closed.ok()) {
      log::Nccl().warn("cannot close a CUDA IPC mapping: {}", closed.message());
    }
  }
}

absl::StatusOr<Mapping> IpcHandleCache::Acquire(int device, absl::string_view handle) {
  if (handle.size() != kIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a CUDA IPC memory handle has ", kIpcHandleBytes,
                                                   " bytes, not ", handle.size()));
  }
  auto it = entries_.find(handle);
  if (it != entries_.end()) {
    if (it->second.device != device) {
      return absl::InvalidArgumentError(absl::StrCat("the allocation is registered on CUDA device ",
                                                     it->second.device, " already, not on device ",
                                                     device));
    }
    ++it->second.references;
    return it->second.mapping;
  }
  absl::StatusOr<Mapping> mapping = opener_.OpenMemory(device, handle);
  if (!mapping.ok()) return mapping.status();
  entries_.emplace(std::string(handle), Entry{device, *mapping, 1});
  return *mapping;
}

void IpcHandleCache::Retain(absl::string_view handle) {
  auto it = entries_.find(handle);
  if (it != entries_.end()) ++it->second.references;
}

void IpcHandleCache::Release(absl::string_view handle) {
  auto it = entries_.find(handle);
  if (it == entries_.end() || --it->second.references > 0) return;
  if (absl::Status closed = opener_.CloseMemory(it->second.device, it->second.mapping.base);
      !closed.ok()) {
    log::Nccl().warn("cannot close a CUDA IPC mapping on device {}: {}", it->second.device,
                     closed.message());
  }
  entries_.erase(it);
}

uint32_t IpcHandleCache::references(absl::string_view handle) const {
  auto it = entries_.find(handle);
  return it == entries_.end() ? 0 : it->second.references;
}

}  // namespace collective::daemon::gpu
