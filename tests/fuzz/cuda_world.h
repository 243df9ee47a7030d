// The fake CUDA node the registration fuzz target runs against, and its seed
// generator writes messages for: two devices, three allocations and four
// exportable events, made in the same order every time so that their IPC
// handles (FakeDeviceBackend numbers them) are the same in every process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/unit/gpu/fake_device_backend.h"

namespace collective::fuzz {

struct CudaWorld {
  std::unique_ptr<daemon::gpu::FakeDeviceBackend> backend;
  std::vector<daemon::gpu::FakeDeviceBackend::Allocation> allocations;
  std::vector<std::string> events;
};

inline constexpr int kWorldDevices = 2;
inline constexpr int kWorldEvents = 4;

inline CudaWorld MakeCudaWorld() {
  CudaWorld world;
  world.backend = std::make_unique<daemon::gpu::FakeDeviceBackend>(kWorldDevices);
  world.allocations.push_back(world.backend->Allocate(0, 4096));
  world.allocations.push_back(world.backend->Allocate(0, 256));
  world.allocations.push_back(world.backend->Allocate(1, 4096));
  for (int i = 0; i < kWorldEvents; ++i) {
    world.events.push_back(world.backend->ExportEvent(absl::StrCat("event", i)));
  }
  return world;
}

}  // namespace collective::fuzz
