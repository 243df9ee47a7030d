// libFuzzer target: CUDA registrations (RegisterCuda: device, event slots,
// allocations, unregistrations) and the CUDA requests that use them, as the
// engine handles a submission ring record: registration first, then each
// request through the validator and the GPU executor's admission, against a
// fake CUDA node (cuda_world.h).
//
// Input: steps, each a client (one byte: two clients share the node) and a
// serialized ClientMessage (a blob). A request whose id is odd finishes at
// once, the others stay admitted until the clients are forgotten at the end.
// Checked beyond "no crash": a request the executor admits names ranges that
// lie inside allocations the client registered (checked against a second,
// independent registry fed the same registrations).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "collective/v1/collective.pb.h"
#include "daemon/gpu/client_devices.h"
#include "daemon/gpu/gpu_executor.h"
#include "daemon/gpu/ipc_handle_cache.h"
#include "daemon/job/request_validator.h"
#include "tests/fuzz/cuda_world.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_input.h"

namespace collective::fuzz {
namespace {

using daemon::gpu::FakeDeviceBackend;

// Whether [at, at + bytes) lies inside one of the world's allocations.
bool InsideAllocation(const CudaWorld& world, const std::byte* at, uint64_t bytes) {
  for (const FakeDeviceBackend::Allocation& allocation : world.allocations) {
    if (at >= allocation.data && at <= allocation.data + allocation.bytes &&
        bytes <= static_cast<uint64_t>(allocation.data + allocation.bytes - at)) {
      return true;
    }
  }
  return false;
}

}  // namespace

void FuzzOne(FuzzInput& input) {
  CudaWorld world = MakeCudaWorld();
  // The shadow: the same node again, with a registry of its own that sees
  // the same registrations, to say where an admitted request's ranges lie.
  CudaWorld shadow = MakeCudaWorld();
  daemon::gpu::IpcHandleCache cache(*shadow.backend);
  daemon::gpu::ClientDevices devices(*shadow.backend, cache, {.max_event_slots = 64});

  daemon::gpu::DevicePath path(std::move(world.backend), {.max_event_slots = 64}, [](uint64_t) {});
  daemon::gpu::GpuExecutor executor(path, 1);
  const daemon::job::RequestLimits limits{.arena_bytes = 1 << 20, .cuda = true};
  v1::ClientMessage message;
  for (int steps = 0; !input.empty() && steps < 64; ++steps) {
    const uint64_t client = 1 + (input.Take<uint8_t>() & 1);
    const std::string_view bytes = input.TakeBlob(1 << 16);
    if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) continue;
    if (message.has_cuda()) {
      (void)executor.Register(client, message.cuda());
      (void)devices.Register(client, message.cuda());
    }
    for (const v1::TensorRequest& request : message.submit().requests()) {
      if (!daemon::job::ValidateRequest(request, limits).ok() ||
          request.memory() != v1::MEMORY_KIND_CUDA) {
        continue;
      }
      if (!executor.Admit(client, request).ok()) continue;
      const absl::StatusOr<std::byte*> input_at =
          devices.Resolve(client, request.device_input(), request.length(), "input");
      const absl::StatusOr<std::byte*> output_at = devices.Resolve(
          client, request.device_output(), request.device_output().bytes(), "output");
      Require(input_at.ok() && output_at.ok(),
              "an admitted request's ranges are in registered allocations");
      Require(InsideAllocation(shadow, *input_at, request.length()) &&
                  InsideAllocation(shadow, *output_at, request.device_output().bytes()),
              "an admitted request's ranges lie inside their allocations");
      if ((request.request_id() & 1) != 0) executor.Finish(client, request.request_id());
    }
  }
  executor.Forget(1);
  executor.Forget(2);
  devices.Forget(1);
  devices.Forget(2);
}

}  // namespace collective::fuzz
