// The narrow interface between the daemon's GPU path and CUDA/NCCL: what the
// GPU executor asks of the devices, in the order it wants it done. The real
// implementation (cuda_backend.h, with nccl_backend.h) exists only in builds
// that found CUDA and NCCL; unit tests drive the executor with a fake that
// does the same work in host memory.
//
// Work on a device goes onto a stream of the daemon, in the order of the
// calls; each lane (a job) has a stream of its own per device, so that one
// job's work never waits behind another's. Nothing here waits for the GPU. Devices are named by
// this daemon's CUDA ordinal; communicator peers and roots by communicator
// rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collective/v1/types.pb.h"
#include "daemon/exec/reduce_kernels.h"

namespace collective::daemon::gpu {

// cudaIpcMemHandle_t and cudaIpcEventHandle_t are 64 bytes; a device UUID 16.
inline constexpr size_t kIpcHandleBytes = 64;
inline constexpr size_t kUuidBytes = 16;

struct DeviceInfo {
  int ordinal = 0;
  std::string uuid;  // kUuidBytes
  std::string name;  // for messages: "NVIDIA H100 80GB HBM3"
};

// A client's allocation, opened in the daemon: where it lies in the daemon's
// address space and how large the mapping really is.
struct Mapping {
  std::byte* base = nullptr;
  uint64_t bytes = 0;
};

// What opens and closes CUDA IPC memory handles (the cache's view of the
// backend, which tests replace with a counting fake).
class IpcMemoryOpener {
 public:
  virtual ~IpcMemoryOpener() = default;
  virtual absl::StatusOr<Mapping> OpenMemory(int device, absl::string_view ipc_handle) = 0;
  virtual absl::Status CloseMemory(int device, std::byte* base) = 0;
};

// An opened interprocess event, and a communicator: backend-defined ids.
using EventId = uint64_t;
using CommId = uint64_t;

struct DeviceCopy {
  const void* source = nullptr;
  void* destination = nullptr;
  uint64_t bytes = 0;
};

// A communicator of this node's `devices` (ordinals; device i is rank
// first_rank + i of `ranks`). An empty unique id makes one of these devices
// alone (ncclCommInitAll); otherwise every node's daemon creates its part
// with the same id (ncclCommInitRank).
struct CommunicatorSpec {
  std::vector<int> devices;
  int ranks = 0;
  int first_rank = 0;
  std::string unique_id;
};

class DeviceBackend : public IpcMemoryOpener {
 public:
  // The devices this daemon can use. The first call initialises CUDA; an
  // error says why no device can be used (no driver, no device).
  virtual absl::StatusOr<std::vector<DeviceInfo>> Devices() = 0;

  virtual absl::StatusOr<EventId> OpenEvent(int device, absl::string_view ipc_handle) = 0;
  virtual void CloseEvent(EventId event) = 0;

  // Communicators (NCCL). CreateCommunicator blocks until every rank has
  // joined; the others never block.
  virtual absl::StatusOr<std::string> NewUniqueId() = 0;
  virtual absl::StatusOr<CommId> CreateCommunicator(const CommunicatorSpec& spec) = 0;
  // An error the communicator ran into in the background (ncclCommGetAsyncError).
  virtual absl::Status CommunicatorError(CommId comm) = 0;
  // Stops the communicator's kernels wherever they wait (ncclCommAbort) and
  // frees it.
  virtual void AbortCommunicator(CommId comm) = 0;
  virtual void DestroyCommunicator(CommId comm) = 0;
  // The stream-ordered work below (and NCCL's) goes onto `lane`'s streams
  // from now on (lane 0 until the first call).
  virtual void UseLane(uint64_t lane) = 0;
  // After an abort: work queued on the current lane's streams may never
  // finish, so the lane's later work goes onto new streams.
  virtual void AbandonStreams() = 0;
  // The lane's job is gone: its streams go once their work is done.
  virtual void EndLane(uint64_t lane) = 0;

  // Stream-ordered work on device `device`.
  virtual absl::StatusOr<std::byte*> AllocateScratch(int device, uint64_t bytes) = 0;
  virtual absl::Status FreeScratch(int device, std::byte* buffer) = 0;
  virtual absl::Status WaitEvent(int device, EventId event) = 0;
  virtual absl::Status RecordEvent(int device, EventId event) = 0;
  // Every copy of `copies` (one batched kernel).
  virtual absl::Status Copy(int device, std::span<const DeviceCopy> copies) = 0;
  // out = exec::Reduce(spec, inputs) as exec/reduce_kernels.h defines it
  // (float16 and bfloat16 accumulated in float32, inputs folded in order),
  // where a null input stands for zeros and no input at all gives the op's
  // identity (0 for SUM, 1 for PRODUCT, the type's largest for MIN and
  // smallest for MAX).
  virtual absl::Status Reduce(int device, const exec::ReduceSpec& spec,
                              std::span<const void* const> inputs, void* out, uint64_t count) = 0;

  // NCCL collectives, called once per device of this node between
  // GroupStart and GroupEnd. `op` is SUM, MIN, MAX, PRODUCT or AVERAGE
  // (which divides by the communicator's ranks).
  virtual absl::Status GroupStart() = 0;
  virtual absl::Status GroupEnd() = 0;
  virtual absl::Status AllReduce(CommId comm, int device, const void* send, void* recv,
                                 uint64_t count, v1::DataType dtype, v1::ReduceOp op) = 0;
  // `send` is read on the root only.
  virtual absl::Status Broadcast(CommId comm, int device, const void* send, void* recv,
                                 uint64_t bytes, int root) = 0;
  // `recv` is written on the root only (null elsewhere).
  virtual absl::Status ReduceToRoot(CommId comm, int device, const void* send, void* recv,
                                    uint64_t count, v1::DataType dtype, v1::ReduceOp op,
                                    int root) = 0;
  virtual absl::Status Send(CommId comm, int device, const void* buffer, uint64_t bytes,
                            int peer) = 0;
  virtual absl::Status Recv(CommId comm, int device, void* buffer, uint64_t bytes, int peer) = 0;

  // Calls `done` (on a thread of the backend; it must not call back into the
  // backend) once the device's stream has done all the work queued so far.
  virtual absl::Status NotifyWhenDone(int device, std::function<void()> done) = 0;
};

}  // namespace collective::daemon::gpu
