// The daemon's GPU path as its jobs share it: the CUDA/NCCL backend, the
// IPC mappings of every job's clients (one cache: an allocation is opened
// once however many requests use it), and the batches on the GPU — whose
// job (lane) each belongs to, until every device has done it. A job's own
// part (its clients' devices and events, its NCCL communicators, the
// admission of its requests) is its GpuExecutor (gpu_executor.h), whose work
// goes onto streams of its lane, so that one job's stalled or aborted work
// never holds up or abandons another's.
//
// Engine thread only, except the notify callback, which a backend thread
// calls (it posts to the engine).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/clock.h"
#include "daemon/gpu/device_backend.h"
#include "daemon/gpu/ipc_handle_cache.h"

namespace collective::daemon::gpu {

class DevicePath {
 public:
  struct Options {
    // Slots of one client's event pool; one per outstanding request at most.
    uint32_t max_event_slots = 4096;
    // A batch still not done on the GPU after this long fails its job.
    double timeout_seconds = 300;
  };
  // Called with a batch id from a backend thread, once per device.
  using Notify = std::function<void(uint64_t batch)>;

  // A batch enqueued on the GPU.
  struct Flight {
    int devices_left = 0;
    std::vector<std::string> handles;  // retained in the cache
    std::vector<std::string> tensors;  // for errors
    Clock::time_point started;
  };

  // `backend` null: this collectived was built without CUDA.
  DevicePath(std::unique_ptr<DeviceBackend> backend, Options options, Notify notify);
  ~DevicePath();
  DevicePath(const DevicePath&) = delete;
  DevicePath& operator=(const DevicePath&) = delete;

  bool built() const { return backend_ != nullptr; }
  const Options& options() const { return options_; }
  // The backend with `lane`'s streams chosen for the stream-ordered work
  // that follows (only when built).
  DeviceBackend& On(uint64_t lane);
  // What opens IPC memory and events, whatever the lane (only when built).
  DeviceBackend& opener() { return *backend_; }
  IpcHandleCache& cache() { return *cache_; }

  // `flight`, just enqueued on `lane`'s streams of `devices`, is tracked
  // until every device has done it (its handles retained till then): its id.
  uint64_t Track(uint64_t lane, Flight flight, std::span<const int> devices);

  struct Done {
    uint64_t lane = 0;
    uint64_t batch = 0;
    Clock::time_point started;
  };
  // One device finished batch `id`: the batch and its lane, once every
  // device has (nothing for a batch of an abandoned lane).
  std::optional<Done> OnDeviceDone(uint64_t id);

  // Batches of `lane` on the GPU; of every lane.
  size_t in_flight(uint64_t lane) const;
  size_t in_flight() const { return in_flight_.size(); }
  // `lane`'s oldest batch on the GPU, or null.
  const Flight* Oldest(uint64_t lane) const;
  // The tensors of `lane`'s batches on the GPU, for errors.
  std::vector<std::string> Tensors(uint64_t lane) const;
  // `lane`'s job ended with work on the GPU, which may never finish: its
  // batches keep their mappings open until it does, and report no more.
  void Abandon(uint64_t lane);
  // The job of `lane` is gone: its streams go once their work is done.
  void EndLane(uint64_t lane);

  size_t open_mappings() const { return cache_ ? cache_->open_mappings() : 0; }

 private:
  struct Tracked {
    uint64_t lane = 0;
    Flight flight;
  };
  // Called by backend threads; outlives the path if the GPU is late.
  struct Gate {
    std::mutex mutex;
    Notify notify;
  };

  std::unique_ptr<DeviceBackend> backend_;
  const Options options_;
  std::shared_ptr<Gate> gate_;
  std::unique_ptr<IpcHandleCache> cache_;
  absl::flat_hash_map<uint64_t, Tracked> in_flight_;
  // Batches of abandoned lanes: their mappings stay open until the GPU is
  // done with them, which may be never.
  absl::flat_hash_map<uint64_t, Tracked> abandoned_;
  uint64_t next_batch_ = 1;
};

}  // namespace collective::daemon::gpu
