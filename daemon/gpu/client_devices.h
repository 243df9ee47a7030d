// What each client registered for its CUDA tensors: its device, its event
// pool and its allocations (mapped through the shared IpcHandleCache). The
// new event slots of a registration come all or none; each allocation on
// its own. What failed keeps its reason, so that a request that runs into it
// says why it cannot run. Engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/v1/collective.pb.h"
#include "collective/v1/types.pb.h"
#include "daemon/gpu/device_backend.h"
#include "daemon/gpu/event_pool.h"
#include "daemon/gpu/ipc_handle_cache.h"

namespace collective::daemon::gpu {

class ClientDevices {
 public:
  struct Limits {
    uint32_t max_event_slots = 4096;
    uint32_t max_allocations = 65536;
  };

  ClientDevices(DeviceBackend& backend, IpcHandleCache& cache, Limits limits)
      : backend_(backend), cache_(cache), limits_(limits) {}
  // Forgets every client.
  ~ClientDevices();
  ClientDevices(const ClientDevices&) = delete;
  ClientDevices& operator=(const ClientDevices&) = delete;

  absl::Status Register(uint64_t client, const v1::RegisterCuda& message);
  // Drops everything `client` registered: its events at once, its mappings
  // when no batch on the GPU refers to them any more.
  void Forget(uint64_t client);

  // The client's device (ordinal); nullopt before it registered one.
  std::optional<int> DeviceOf(uint64_t client) const;
  // The distinct devices of every registered client, ascending.
  std::vector<int> Devices() const;

  // Where `bytes` bytes at range.offset of the client's allocation
  // range.allocation_id lie in the daemon; `what` ("input", "output") names
  // the range in errors. An empty range without an allocation (id 0, an
  // empty tensor's) resolves to null.
  absl::StatusOr<std::byte*> Resolve(uint64_t client, const v1::DeviceRange& range, uint64_t bytes,
                                     absl::string_view what) const;
  // The IPC handle of a registered allocation (to hold it while a batch
  // uses it); null if it is not registered.
  const std::string* HandleOf(uint64_t client, uint64_t allocation_id) const;
  // The client's event pool; null before it registered a device.
  EventPool* Events(uint64_t client);
  // Why slots the client registered last are missing (OK if none is).
  absl::Status EventsFailure(uint64_t client) const;

 private:
  // The first client's device registration says, in the log, when MPS is
  // not running (daemon/gpu/mps.h says what that costs).
  void WarnOnceWithoutMps();

  struct Allocation {
    std::string handle;
    Mapping mapping;
  };
  struct Client {
    int device = 0;
    std::string uuid;
    EventPool events;
    absl::flat_hash_map<uint64_t, Allocation> allocations;
    absl::flat_hash_map<uint64_t, absl::Status> failed;  // allocation id -> why
    absl::Status events_failure;  // why slots the client counts on do not exist
  };

  absl::StatusOr<int> DeviceOfUuid(const std::string& uuid);
  absl::Status AddEvents(Client& client, const v1::RegisterCuda& message);
  absl::Status AddAllocations(Client& client, const v1::RegisterCuda& message);
  absl::Status AddAllocation(Client& client, const v1::CudaAllocation& allocation);
  void CloseEvents(std::vector<EventId> events);

  DeviceBackend& backend_;
  IpcHandleCache& cache_;
  const Limits limits_;
  absl::flat_hash_map<uint64_t, Client> clients_;
  // Clients whose device could not be registered, and why.
  absl::flat_hash_map<uint64_t, absl::Status> device_failures_;
  bool mps_checked_ = false;
};

}  // namespace collective::daemon::gpu
