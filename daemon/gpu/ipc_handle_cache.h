// The daemon's CUDA IPC mappings, keyed by handle bytes: each allocation a
// client registers is opened once (cudaIpcOpenMemHandle may not be called
// twice for one handle in one process), however many registrations and
// in-flight batches refer to it, and closed when the last reference goes —
// the client unregistered it, left or died, and no work on the GPU still
// uses it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/gpu/device_backend.h"

namespace collective::daemon::gpu {

class IpcHandleCache {
 public:
  explicit IpcHandleCache(IpcMemoryOpener& opener) : opener_(opener) {}
  // Closes every mapping still open.
  ~IpcHandleCache();
  IpcHandleCache(const IpcHandleCache&) = delete;
  IpcHandleCache& operator=(const IpcHandleCache&) = delete;

  // A reference to the mapping of `handle` (kIpcHandleBytes) on `device`,
  // opened at its first reference. Nothing is held on error.
  absl::StatusOr<Mapping> Acquire(int device, absl::string_view handle);
  // One more reference to a mapping that is held already.
  void Retain(absl::string_view handle);
  // Drops a reference; the last one closes the mapping.
  void Release(absl::string_view handle);

  size_t open_mappings() const { return entries_.size(); }
  // References to `handle`; 0 when it is not open.
  uint32_t references(absl::string_view handle) const;

 private:
  struct Entry {
    int device = 0;
    Mapping mapping;
    uint32_t references = 0;
  };

  IpcMemoryOpener& opener_;
  absl::flat_hash_map<std::string, Entry> entries_;
};

}  // namespace collective::daemon::gpu
