#include "daemon/gpu/client_devices.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/gpu/mps.h"

namespace collective::daemon::gpu {
namespace {

std::string UuidText(const std::string& uuid) { return absl::BytesToHexString(uuid); }

}  // namespace

ClientDevices::~ClientDevices() {
  std::vector<uint64_t> ids;
  for (const auto& [id, client] : clients_) ids.push_back(id);
  for (uint64_t id : ids) Forget(id);
}

absl::StatusOr<int> ClientDevices::DeviceOfUuid(const std::string& uuid) {
  if (uuid.size() != kUuidBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CUDA device uuid has ", kUuidBytes, " bytes, not ", uuid.size()));
  }
  ASSIGN_OR_RETURN_WITH(const std::vector<DeviceInfo> devices, backend_.Devices(),
                        "collectived cannot use CUDA");
  std::vector<std::string> seen;
  for (const DeviceInfo& device : devices) {
    if (device.uuid == uuid) return device.ordinal;
    seen.push_back(
        absl::StrCat(device.ordinal, ": ", device.name, " (", UuidText(device.uuid), ")"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the client's CUDA device (uuid ", UuidText(uuid),
                   ") is not one collectived can see; it sees ",
                   seen.empty() ? "none" : absl::StrJoin(seen, ", "),
                   " (is CUDA_VISIBLE_DEVICES narrower for the daemon?)"));
}

absl::Status ClientDevices::Register(uint64_t client_id, const v1::RegisterCuda& message) {
  auto existing = clients_.find(client_id);
  if (existing == clients_.end()) {
    if (message.device_uuid().empty()) {
      return absl::InvalidArgumentError(
          "the first CUDA registration of a client must name its device (device_uuid)");
    }
    absl::StatusOr<int> device = DeviceOfUuid(message.device_uuid());
    if (!device.ok()) {
      device_failures_[client_id] = device.status();  // for the requests that follow
      return device.status();
    }
    device_failures_.erase(client_id);
    Client client;
    client.device = *device;
    client.uuid = message.device_uuid();
    existing = clients_.emplace(client_id, std::move(client)).first;
    WarnOnceWithoutMps();
  } else if (!message.device_uuid().empty() && message.device_uuid() != existing->second.uuid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the client registered CUDA device ", UuidText(existing->second.uuid),
        " before and now names ", UuidText(message.device_uuid()), "; a client uses one device"));
  }
  Client& client = existing->second;
  // Slots and allocations stand on their own: one allocation that cannot be
  // opened does not take the others (or the new slots) with it. The first
  // error is the answer; each failure is also kept for the requests that
  // run into it.
  absl::Status status = AddEvents(client, message);
  if (!status.ok()) client.events_failure = status;
  if (absl::Status added = AddAllocations(client, message); status.ok()) status = added;
  for (uint64_t id : message.unregister()) {
    auto it = client.allocations.find(id);
    if (it == client.allocations.end()) continue;
    cache_.Release(it->second.handle);
    client.allocations.erase(it);
  }
  return status;
}

absl::Status ClientDevices::AddEvents(Client& client, const v1::RegisterCuda& message) {
  if (message.ready_events_size() != message.done_events_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a CUDA event slot needs a ready and a done event; the client sent ",
        message.ready_events_size(), " ready and ", message.done_events_size(), " done events"));
  }
  const size_t slots = client.events.size() + static_cast<size_t>(message.ready_events_size());
  if (slots > limits_.max_event_slots) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the client's CUDA event pool would have ", slots, " slots; the limit is ",
        limits_.max_event_slots, " (one per outstanding request, max_outstanding_requests)"));
  }
  std::vector<EventId> opened;
  for (int i = 0; i < message.ready_events_size(); ++i) {
    for (const std::string* handle : {&message.ready_events(i), &message.done_events(i)}) {
      absl::StatusOr<EventId> event = handle->size() == kIpcHandleBytes
                                          ? backend_.OpenEvent(client.device, *handle)
                                          : absl::InvalidArgumentError(absl::StrCat(
                                                "a CUDA IPC event handle has ", kIpcHandleBytes,
                                                " bytes, not ", handle->size()));
      if (!event.ok()) {
        CloseEvents(std::move(opened));
        return Annotate(event.status(), absl::StrCat("CUDA event slot ", client.events.size() + i));
      }
      opened.push_back(*event);
    }
  }
  for (size_t i = 0; i < opened.size(); i += 2) client.events.Add(opened[i], opened[i + 1]);
  return absl::OkStatus();
}

absl::Status ClientDevices::AddAllocation(Client& client, const v1::CudaAllocation& allocation) {
  const uint64_t id = allocation.allocation_id();
  if (id == 0 || client.allocations.contains(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA allocation id ", id, id == 0 ? " is reserved" : " is registered already"));
  }
  if (client.allocations.size() >= limits_.max_allocations) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a client may register at most ", limits_.max_allocations, " CUDA allocations at once"));
  }
  ASSIGN_OR_RETURN_WITH(const Mapping mapping,
                        cache_.Acquire(client.device, allocation.ipc_handle()),
                        absl::StrCat("CUDA allocation ", id, " cannot be opened"));
  if (mapping.bytes != allocation.bytes()) {
    cache_.Release(allocation.ipc_handle());
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA allocation ", id, " has ", allocation.bytes(),
                     " bytes as the client sees it, but its mapping in collectived has ",
                     mapping.bytes, " (the handle is not the allocation's base?)"));
  }
  client.allocations.emplace(id, Allocation{allocation.ipc_handle(), mapping});
  return absl::OkStatus();
}

absl::Status ClientDevices::AddAllocations(Client& client, const v1::RegisterCuda& message) {
  absl::Status first;
  for (const v1::CudaAllocation& allocation : message.allocations()) {
    absl::Status added = AddAllocation(client, allocation);
    if (added.ok()) {
      client.failed.erase(allocation.allocation_id());
      continue;
    }
    if (allocation.allocation_id() != 0 &&
        !client.allocations.contains(allocation.allocation_id())) {
      client.failed[allocation.allocation_id()] = added;
    }
    if (first.ok()) first = added;
  }
  return first;
}

void ClientDevices::CloseEvents(std::vector<EventId> events) {
  for (EventId event : events) backend_.CloseEvent(event);
}

void ClientDevices::Forget(uint64_t client_id) {
  device_failures_.erase(client_id);
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return;
  CloseEvents(it->second.events.TruncateTo(0));
  for (const auto& [id, allocation] : it->second.allocations) cache_.Release(allocation.handle);
  clients_.erase(it);
}

std::optional<int> ClientDevices::DeviceOf(uint64_t client) const {
  auto it = clients_.find(client);
  if (it == clients_.end()) return std::nullopt;
  return it->second.device;
}

std::vector<int> ClientDevices::Devices() const {
  std::set<int> devices;
  for (const auto& [id, client] : clients_) devices.insert(client.device);
  return {devices.begin(), devices.end()};
}

absl::StatusOr<std::byte*> ClientDevices::Resolve(uint64_t client_id, const v1::DeviceRange& range,
                                                  uint64_t bytes, absl::string_view what) const {
  // An empty range names no allocation: nothing is read or written there.
  if (range.allocation_id() == 0 && bytes == 0) return nullptr;
  auto client = clients_.find(client_id);
  if (client == clients_.end()) {
    if (auto failed = device_failures_.find(client_id); failed != device_failures_.end()) {
      return Annotate(failed->second, absl::StrCat("the ", what,
                                                   " is a CUDA tensor but the client's CUDA "
                                                   "device could not be registered"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("the ", what, " is a CUDA tensor but the client registered no CUDA device"));
  }
  const uint64_t id = range.allocation_id();
  auto allocation = client->second.allocations.find(id);
  if (allocation == client->second.allocations.end()) {
    auto failed = client->second.failed.find(id);
    if (failed != client->second.failed.end()) {
      return Annotate(failed->second,
                      absl::StrCat("the ", what, "'s allocation was not registered"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " names CUDA allocation ", id, ", which is not registered"));
  }
  const Mapping& mapping = allocation->second.mapping;
  uint64_t end = 0;
  if (__builtin_add_overflow(range.offset(), bytes, &end) || end > mapping.bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " (offset ", range.offset(), " + ",
                                                   bytes, " bytes) lies outside CUDA allocation ",
                                                   id, " of ", mapping.bytes, " bytes"));
  }
  return mapping.base + range.offset();
}

const std::string* ClientDevices::HandleOf(uint64_t client, uint64_t allocation_id) const {
  auto it = clients_.find(client);
  if (it == clients_.end()) return nullptr;
  auto allocation = it->second.allocations.find(allocation_id);
  return allocation == it->second.allocations.end() ? nullptr : &allocation->second.handle;
}

absl::Status ClientDevices::EventsFailure(uint64_t client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? absl::OkStatus() : it->second.events_failure;
}

EventPool* ClientDevices::Events(uint64_t client) {
  auto it = clients_.find(client);
  return it == clients_.end() ? nullptr : &it->second.events;
}

void ClientDevices::WarnOnceWithoutMps() {
  if (mps_checked_) return;
  mps_checked_ = true;
  if (MpsRunning()) return;
  log::Nccl().warn(
      "CUDA MPS is not running (no {}): the GPU time-slices between this daemon's CUDA context "
      "and each client's, which adds a few hundred microseconds per client sharing the GPU to "
      "every collective; start it with `nvidia-cuda-mps-control -d` (docs/gpu.md)",
      MpsControlPipe());
}

}  // namespace collective::daemon::gpu
