// The daemon's GPU path, as the engine sees it: what clients registered
// (devices, event pools, IPC mappings), the admission of CUDA requests, the
// job's NCCL communicators, and fused batches of CUDA tensors enqueued on
// the devices (device_ops.h) without waiting for the GPU. The backend calls
// back when a batch is done on every device; until then the batch keeps the
// mappings it uses open, also if their client has gone.
//
// Engine thread only, except the notify callback, which a backend thread
// calls (it posts to the engine).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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
#include "daemon/gpu/ipc_handle_cache.h"

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
  struct Options {
    // Slots of one client's event pool; one per outstanding request at most.
    uint32_t max_event_slots = 4096;
    // A batch still not done on the GPU after this long fails the job.
    double timeout_seconds = 300;
  };
  // Called with a batch id from a backend thread, once per device.
  using Notify = std::function<void(uint64_t batch)>;

  // `backend` null: this collectived was built without CUDA.
  GpuExecutor(std::unique_ptr<DeviceBackend> backend, Options options, Notify notify);
  ~GpuExecutor();
  GpuExecutor(const GpuExecutor&) = delete;
  GpuExecutor& operator=(const GpuExecutor&) = delete;

  bool built() const { return backend_ != nullptr; }

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
  // events after. `share` is used the first time a batch spans nodes.
  Outcome Run(const exec::FusedBatch& batch, const ShareLayout& share);

  struct Done {
    uint64_t batch = 0;
    Clock::time_point started;
  };
  // One device finished batch `id`: the batch, once every device has.
  std::optional<Done> OnDeviceDone(uint64_t id);
  // OK while the job's GPU work can go on; else why not (an NCCL error in
  // the background, a batch past the timeout).
  absl::Status Health(Clock::time_point now);
  // The job is over: its communicators go — aborted when work is still on
  // the GPU (so that NCCL kernels waiting for a rank that will never come
  // stop), whose streams are then abandoned.
  void EndJob();

  size_t in_flight() const { return in_flight_.size(); }
  size_t open_mappings() const { return cache_ ? cache_->open_mappings() : 0; }

 private:
  struct Flight {
    int devices_left = 0;
    std::vector<std::string> handles;  // retained in the cache
    std::vector<std::string> tensors;  // for errors
    Clock::time_point started;
  };
  // Called by backend threads; outlives the executor if the GPU is late.
  struct Gate {
    std::mutex mutex;
    Notify notify;
  };

  absl::StatusOr<const Communicator*> LocalCommunicator();
  absl::StatusOr<const Communicator*> GlobalCommunicator(const ShareLayout& share);
  absl::StatusOr<std::vector<DeviceTensor>> Resolve(const exec::FusedBatch& batch,
                                                    const Communicator& comm, Flight& flight);
  absl::Status Issue(const exec::FusedBatch& batch, const Communicator& comm,
                     std::span<const DeviceTensor> tensors);
  void DropCommunicators(bool abort);

  std::unique_ptr<DeviceBackend> backend_;
  const Options options_;
  std::shared_ptr<Gate> gate_;
  std::unique_ptr<IpcHandleCache> cache_;
  std::unique_ptr<ClientDevices> devices_;
  // (client, request id) -> event slot.
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, uint32_t> admitted_;
  std::optional<Communicator> local_;
  std::optional<Communicator> global_;
  absl::flat_hash_map<uint64_t, Flight> in_flight_;
  // Batches of aborted jobs: their mappings stay open until the GPU is done
  // with them, which may be never.
  absl::flat_hash_map<uint64_t, Flight> abandoned_;
  uint64_t next_batch_ = 1;
};

}  // namespace collective::daemon::gpu
