// collective-bench's CUDA side (--device cuda): device memory and a stream for
// a client worker's tensors, and the device-to-device copy bandwidth that
// the GPU results are measured against. Built with the CUDA runtime where
// CMake found CUDA (device_memory_cuda.cc); elsewhere every call says that
// this collective-bench has no CUDA (device_memory_none.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace collective::bench {

class DeviceMemory {
 public:
  // Uses CUDA device `local_rank` modulo the devices (ranks share devices
  // when there are more of them).
  static absl::StatusOr<std::unique_ptr<DeviceMemory>> Open(int local_rank);
  virtual ~DeviceMemory() = default;

  // Device memory, freed with this object.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // Stream-ordered copies; Download returns once the host has the bytes.
  virtual absl::Status Upload(void* device, const void* host, size_t bytes) = 0;
  virtual absl::Status Download(void* host, const void* device, size_t bytes) = 0;
  // Returns once the stream has done everything queued (the end of a timed
  // step: the results are on the device).
  virtual absl::Status Synchronize() = 0;
  // The cudaStream_t the worker's tensors are produced and consumed on.
  virtual void* stream() const = 0;
};

// Bytes per second of a cudaMemcpy of `bytes` within device 0, the fastest of
// a few, timed with CUDA events.
absl::StatusOr<double> MeasureDeviceCopy(uint64_t bytes);

}  // namespace collective::bench
