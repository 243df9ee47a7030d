#include "daemon/gpu/device_path.h"

#include <algorithm>

#include "common/logging.h"

namespace collective::daemon::gpu {

DevicePath::DevicePath(std::unique_ptr<DeviceBackend> backend, Options options, Notify notify)
    : backend_(std::move(backend)), options_(options), gate_(std::make_shared<Gate>()) {
  gate_->notify = std::move(notify);
  if (backend_ != nullptr) cache_ = std::make_unique<IpcHandleCache>(*backend_);
}

DevicePath::~DevicePath() {
  std::lock_guard lock(gate_->mutex);
  gate_->notify = nullptr;
}

DeviceBackend& DevicePath::On(uint64_t lane) {
  backend_->UseLane(lane);
  return *backend_;
}

uint64_t DevicePath::Track(uint64_t lane, Flight flight, std::span<const int> devices) {
  const uint64_t id = next_batch_++;
  flight.devices_left = static_cast<int>(devices.size());
  for (const std::string& handle : flight.handles) cache_->Retain(handle);
  in_flight_.emplace(id, Tracked{.lane = lane, .flight = std::move(flight)});
  DeviceBackend& backend = On(lane);
  for (int device : devices) {
    absl::Status notified = backend.NotifyWhenDone(device, [gate = gate_, id] {
      std::lock_guard lock(gate->mutex);
      if (gate->notify) gate->notify(id);
    });
    if (!notified.ok()) {
      // The work is queued; only its end cannot be seen. The job's health
      // check reports it if it never ends.
      log::Nccl().error("batch {}: cannot watch for its end on CUDA device {}: {}", id, device,
                        notified.message());
    }
  }
  return id;
}

std::optional<DevicePath::Done> DevicePath::OnDeviceDone(uint64_t id) {
  for (auto* flights : {&in_flight_, &abandoned_}) {
    auto it = flights->find(id);
    if (it == flights->end()) continue;
    if (--it->second.flight.devices_left > 0) return std::nullopt;
    Tracked tracked = std::move(it->second);
    flights->erase(it);
    for (const std::string& handle : tracked.flight.handles) cache_->Release(handle);
    if (flights == &abandoned_) return std::nullopt;
    return Done{.lane = tracked.lane, .batch = id, .started = tracked.flight.started};
  }
  return std::nullopt;
}

size_t DevicePath::in_flight(uint64_t lane) const {
  return static_cast<size_t>(
      std::count_if(in_flight_.begin(), in_flight_.end(),
                    [lane](const auto& entry) { return entry.second.lane == lane; }));
}

const DevicePath::Flight* DevicePath::Oldest(uint64_t lane) const {
  const Flight* oldest = nullptr;
  for (const auto& [id, tracked] : in_flight_) {
    if (tracked.lane != lane) continue;
    if (oldest == nullptr || tracked.flight.started < oldest->started) oldest = &tracked.flight;
  }
  return oldest;
}

std::vector<std::string> DevicePath::Tensors(uint64_t lane) const {
  std::vector<std::string> tensors;
  for (const auto& [id, tracked] : in_flight_) {
    if (tracked.lane != lane) continue;
    tensors.insert(tensors.end(), tracked.flight.tensors.begin(), tracked.flight.tensors.end());
  }
  return tensors;
}

void DevicePath::Abandon(uint64_t lane) {
  std::vector<uint64_t> ids;
  for (const auto& [id, tracked] : in_flight_) {
    if (tracked.lane == lane) ids.push_back(id);
  }
  for (uint64_t id : ids) abandoned_.insert(in_flight_.extract(id));
}

void DevicePath::EndLane(uint64_t lane) {
  if (backend_ != nullptr) backend_->EndLane(lane);
}

}  // namespace collective::daemon::gpu
