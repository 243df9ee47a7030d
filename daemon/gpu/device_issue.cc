#include <algorithm>
#include <iterator>
#include <vector>

#include "daemon/gpu/device_ops.h"

namespace collective::daemon::gpu {

int Communicator::IndexOf(int ordinal) const {
  const auto it = std::find(devices.begin(), devices.end(), ordinal);
  return it == devices.end() ? -1 : static_cast<int>(it - devices.begin());
}

absl::StatusOr<std::byte*> DeviceIssue::Scratch(int index, uint64_t bytes) {
  absl::StatusOr<std::byte*> buffer = backend_.AllocateScratch(ordinal(index), bytes);
  if (buffer.ok()) scratch_.emplace_back(ordinal(index), *buffer);
  return buffer;
}

absl::Status DeviceIssue::Copy(int index, const std::vector<DeviceCopy>& copies) const {
  // Empty tensors' copies (whose ends may be null: no allocation) move
  // nothing; they are left out.
  std::vector<DeviceCopy> moving;
  moving.reserve(copies.size());
  std::copy_if(copies.begin(), copies.end(), std::back_inserter(moving),
               [](const DeviceCopy& copy) { return copy.bytes > 0; });
  if (moving.empty()) return absl::OkStatus();
  return backend_.Copy(ordinal(index), moving);
}

absl::Status DeviceIssue::FreeScratch() {
  absl::Status status;
  for (const auto& [device, buffer] : scratch_) {
    if (absl::Status freed = backend_.FreeScratch(device, buffer); status.ok()) status = freed;
  }
  scratch_.clear();
  return status;
}

}  // namespace collective::daemon::gpu
