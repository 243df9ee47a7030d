// A job's part of the daemon's GPU path (device_path.h holds what jobs
// share): what its clients registered (devices, event pools, IPC mappings),
// the admission of its CUDA requests, its NCCL communicators, and its fused
// batches of CUDA tensors enqueued on the devices (device_ops.h), on its own
// lane of streams, without waiting for the GPU. The path reports when a
// batch is done on every device; until then the batch keeps the mappings it
// uses open, also if their client has gone.
//
// Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/v1/collective.pb.h"
#include "daemon/exec/fusion.h"
#include "daemon/gpu/client_devices.h"
#include "daemon/gpu/device_backend.h"
#include "daemon/gpu/device_ops.h"
#include "daemon/gpu/device_path.h"

namespace collective::daemon::gpu {

// A communicator across nodes: how many ranks it has, where this node's
// devices start, and node 0's unique id.
struct GlobalLayout {
  int ranks = 0;
  int first_rank = 0;
  std::string unique_id;
};
// Makes an NCCL unique id (node 0 only).
using NewUniqueId = std::function<absl::StatusOr<std::string>()>;
// Agrees with the other nodes (over MPI, on the engine thread) on a
// communicator spanning them, given this node's device count; node 0 makes
// the unique id with `new_id`, and every node fails alike if it cannot.
using ShareLayout =
    std::function<absl::StatusOr<GlobalLayout>(int local_devices, const NewUniqueId& new_id)>;

class GpuExecutor {
 public:
  // The job's work goes onto `lane`'s streams (the job's sequence).
  GpuExecutor(DevicePath& path, uint64_t lane);
  // Ends the job's GPU work (EndJob) and its lane.
  ~GpuExecutor();
  GpuExecutor(const GpuExecutor&) = delete;
  GpuExecutor& operator=(const GpuExecutor&) = delete;

  bool built() const { return path_.built(); }
  uint64_t lane() const { return lane_; }

  absl::Status Register(uint64_t client, const v1::RegisterCuda& message);
  // A CUDA request arrives: its ranges must lie in registered allocations and
  // its event slot must be free. On success the slot is the request's until
  // Finish.
  absl::Status Admit(uint64_t client, const v1::TensorRequest& request);
  // The request completed or failed (no-op for one never admitted).
  void Finish(uint64_t client, uint64_t request_id);
  bool has_admitted() const { return !admitted_.empty(); }
  // The client left or died.
  void Forget(uint64_t client);

  // What needs every rank's request: each output holds its rank's result.
  static absl::Status Check(const negotiation::ReadyTensor& tensor);
  // Node 0's check of a CUDA tensor that spans nodes, given every rank's
  // request (joined ranks absent). Across nodes the GPU path runs on the
  // job's NCCL communicator of every GPU of every node: allreduce of the
  // global process set, every rank taking part; anything else is refused.
  static absl::Status CheckAcrossNodes(const negotiation::ReadyTensor& everyone);

  struct Outcome {
    absl::Status status;
    // The failure left the devices in an unknown state (work half queued, a
    // communicator that could not form), or other nodes wait for this one's
    // part of the batch: the job cannot go on.
    bool broken = false;
    Clock::time_point started;
    // The batch's id in OnDeviceDone (when it ran).
    uint64_t batch = 0;
  };
  // Enqueues a batch of CUDA tensors (every one has passed Check), with the
  // waits on the clients' ready events before and the records of their done
  // events after. `share` is used the first time a batch spans nodes. The
  // path's OnDeviceDone says when the GPU has done it.
  Outcome Run(const exec::FusedBatch& batch, const ShareLayout& share);
  // OK while the job's GPU work can go on; else why not (an NCCL error in
  // the background, a batch past the timeout).
  absl::Status Health(Clock::time_point now);
  // The job is over: its communicators go — aborted when its work is still
  // on the GPU (so that NCCL kernels waiting for a rank that will never
  // come stop), whose streams (the job's lane only) are then abandoned.
  void EndJob();

  // The job's batches on the GPU.
  size_t in_flight() const { return path_.in_flight(lane_); }

 private:
  using Flight = DevicePath::Flight;

  DeviceBackend& backend() { return path_.On(lane_); }
  absl::StatusOr<const Communicator*> LocalCommunicator();
  absl::StatusOr<const Communicator*> GlobalCommunicator(const ShareLayout& share);
  absl::StatusOr<std::vector<DeviceTensor>> Resolve(const exec::FusedBatch& batch,
                                                    const Communicator& comm, Flight& flight);
  absl::Status Issue(const exec::FusedBatch& batch, const Communicator& comm,
                     std::span<const DeviceTensor> tensors);
  void DropCommunicators(bool abort);

  DevicePath& path_;
  const uint64_t lane_;
  std::unique_ptr<ClientDevices> devices_;
  // (client, request id) -> event slot.
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, uint32_t> admitted_;
  std::optional<Communicator> local_;
  std::optional<Communicator> global_;
};

}  // namespace collective::daemon::gpu
