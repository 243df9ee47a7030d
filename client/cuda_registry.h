// The client's side of the GPU path: the CUDA device it uses (the one current
// when it first handled a CUDA tensor), the allocations it registered with
// the daemon (by base address, and the driver's buffer id, so that memory
// freed and allocated again at the same address is registered anew), and its
// pool of interprocess event pairs, grown as more requests are in flight.
// What is new goes into a RegisterCuda message, which the caller sends before
// the requests that use it. Not thread-safe: ClientCore calls it under its
// lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cuda_driver.h"
#include "collective/v1/collective.pb.h"
#include "collective/v1/types.pb.h"

namespace collective::internal {

class CudaRegistry {
 public:
  // Event slots are created this many at a time.
  static constexpr uint32_t kSlotsPerGrowth = 8;

  // Uses the calling thread's current CUDA context (and its device); at most
  // `max_slots` event slots (requests in flight).
  static absl::StatusOr<std::unique_ptr<CudaRegistry>> Create(const cuda::Driver& driver,
                                                              uint32_t max_slots);
  ~CudaRegistry();
  CudaRegistry(const CudaRegistry&) = delete;
  CudaRegistry& operator=(const CudaRegistry&) = delete;

  // A RegisterCuda message naming this client's device, for what follows.
  v1::RegisterCuda NewMessage() const;

  // Where [pointer, pointer + bytes) lies: a registered allocation and the
  // offset into it. A new allocation (or one freed and allocated again) is
  // added to `pending`.
  absl::StatusOr<v1::DeviceRange> Locate(const void* pointer, uint64_t bytes,
                                         v1::RegisterCuda& pending);
  // The allocation holding `pointer` is no longer the daemon's to map.
  absl::Status Unregister(const void* pointer, v1::RegisterCuda& pending);

  // A free event slot and the request's sequence number; the pool grows
  // (into `pending`) when every slot is held.
  absl::StatusOr<std::pair<uint32_t, uint64_t>> AcquireSlot(v1::RegisterCuda& pending);
  // The request that held `slot` is over, and the client no longer waits on
  // its done event.
  void ReleaseSlot(uint32_t slot);
  size_t held_slots() const;

  // On `stream` (a CUstream / cudaStream_t; null: the default stream):
  // marks the input ready, and waits for the daemon to have written the
  // output.
  absl::Status RecordReady(uint32_t slot, void* stream);
  absl::Status WaitDone(uint32_t slot, void* stream);

 private:
  struct Known {
    uint64_t buffer_id = 0;
    uint64_t allocation_id = 0;
  };
  struct Slot {
    cuda::Event ready = nullptr;
    cuda::Event done = nullptr;
    bool held = false;
  };

  CudaRegistry(const cuda::Driver& driver, uint32_t max_slots)
      : driver_(driver), max_slots_(max_slots) {}
  // The calling thread must have this client's context current.
  absl::Status CheckContext() const;
  absl::Status Grow(v1::RegisterCuda& pending);

  const cuda::Driver& driver_;
  const uint32_t max_slots_;
  cuda::Context context_ = nullptr;
  cuda::Device device_ = 0;
  std::string uuid_;
  std::map<cuda::DevicePointer, Known> allocations_;  // by base address
  uint64_t next_allocation_ = 1;
  std::vector<Slot> events_;
  uint64_t next_sequence_ = 1;
};

}  // namespace collective::internal
