// client/cuda_registry against a fake CUDA driver: allocations registered
// once (and again when freed and allocated anew at the same address), the
// checks on where a tensor lies, the event pool that grows as requests are
// in flight and reuses a slot only once it is free, and the events recorded
// and waited on in the caller's stream.
#include "client/cuda_registry.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace collective::internal {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// One process's fake GPU: allocations by base address, a current context,
// and what was recorded and waited on. The driver's functions are plain
// function pointers, so the fake is one object they all reach.
struct FakeGpu {
  struct Allocation {
    uint64_t size = 0;
    int device = 0;
    unsigned long long buffer_id = 0;
    bool exportable = true;
  };
  std::map<cuda::DevicePointer, Allocation> allocations;
  cuda::Context current = reinterpret_cast<cuda::Context>(0xc0);
  unsigned long long next_buffer = 1;
  uintptr_t next_event = 0x100;
  int events_created = 0;
  int events_destroyed = 0;
  std::vector<std::string> calls;  // "record <event> <stream>", "wait <stream> <event>"

  void Allocate(cuda::DevicePointer base, uint64_t size, int device = 0) {
    allocations[base] = {size, device, next_buffer++, true};
  }
};

FakeGpu* gpu = nullptr;

constexpr cuda::Result kInvalidValue = 1;

cuda::Driver FakeDriver() {
  cuda::Driver driver{};
  driver.GetErrorString = [](cuda::Result, const char** text) {
    *text = "invalid argument";
    return 0;
  };
  driver.CtxGetCurrent = [](cuda::Context* context) {
    *context = gpu->current;
    return 0;
  };
  driver.CtxGetDevice = [](cuda::Device* device) {
    *device = 0;
    return 0;
  };
  driver.DeviceGetUuid = [](cuda::Uuid* uuid, cuda::Device) {
    std::memcpy(uuid->bytes, "uuid-of-device-0", 16);
    return 0;
  };
  driver.MemGetAddressRange = [](cuda::DevicePointer* base, size_t* size,
                                 cuda::DevicePointer pointer) {
    for (const auto& [start, allocation] : gpu->allocations) {
      if (pointer >= start && pointer < start + allocation.size) {
        *base = start;
        *size = allocation.size;
        return 0;
      }
    }
    return kInvalidValue;
  };
  driver.PointerGetAttribute = [](void* data, int attribute, cuda::DevicePointer pointer) {
    const FakeGpu::Allocation& allocation = gpu->allocations.at(pointer);
    if (attribute == cuda::kAttributeDeviceOrdinal) *static_cast<int*>(data) = allocation.device;
    if (attribute == cuda::kAttributeBufferId) {
      *static_cast<unsigned long long*>(data) = allocation.buffer_id;
    }
    return 0;
  };
  driver.IpcGetMemHandle = [](cuda::IpcMemHandle* handle, cuda::DevicePointer pointer) {
    const FakeGpu::Allocation& allocation = gpu->allocations.at(pointer);
    if (!allocation.exportable) return kInvalidValue;
    std::memset(handle->reserved, 0, sizeof(handle->reserved));
    std::memcpy(handle->reserved, &allocation.buffer_id, sizeof(allocation.buffer_id));
    return 0;
  };
  driver.EventCreate = [](cuda::Event* event, unsigned flags) {
    EXPECT_EQ(flags, cuda::kEventDisableTiming | cuda::kEventInterprocess);
    *event = reinterpret_cast<cuda::Event>(gpu->next_event++);
    ++gpu->events_created;
    return 0;
  };
  driver.EventDestroy = [](cuda::Event) {
    ++gpu->events_destroyed;
    return 0;
  };
  driver.IpcGetEventHandle = [](cuda::IpcEventHandle* handle, cuda::Event event) {
    std::memset(handle->reserved, 0, sizeof(handle->reserved));
    std::memcpy(handle->reserved, &event, sizeof(event));
    return 0;
  };
  driver.EventRecord = [](cuda::Event event, cuda::Stream stream) {
    gpu->calls.push_back("record " + std::to_string(reinterpret_cast<uintptr_t>(event)) + " " +
                         std::to_string(reinterpret_cast<uintptr_t>(stream)));
    return 0;
  };
  driver.StreamWaitEvent = [](cuda::Stream stream, cuda::Event event, unsigned) {
    gpu->calls.push_back("wait " + std::to_string(reinterpret_cast<uintptr_t>(stream)) + " " +
                         std::to_string(reinterpret_cast<uintptr_t>(event)));
    return 0;
  };
  return driver;
}

class CudaRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override { gpu = &fake_; }
  void TearDown() override { gpu = nullptr; }

  std::unique_ptr<CudaRegistry> Create(uint32_t max_slots = 64) {
    auto registry = CudaRegistry::Create(driver_, max_slots);
    EXPECT_TRUE(registry.ok()) << registry.status();
    return registry.ok() ? std::move(*registry) : nullptr;
  }

  static const void* At(cuda::DevicePointer address) {
    return reinterpret_cast<const void*>(address);
  }

  FakeGpu fake_;
  const cuda::Driver driver_ = FakeDriver();
};

TEST_F(CudaRegistryTest, RegistersEachAllocationOnceAndLocatesTensorsInIt) {
  fake_.Allocate(0x10000, 4096);
  auto registry = Create();
  v1::RegisterCuda pending = registry->NewMessage();
  EXPECT_EQ(pending.device_uuid(), "uuid-of-device-0");
  const auto first = registry->Locate(At(0x10100), 64, pending);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->allocation_id(), 1u);
  EXPECT_EQ(first->offset(), 0x100u);
  EXPECT_EQ(first->bytes(), 64u);
  ASSERT_EQ(pending.allocations_size(), 1);
  EXPECT_EQ(pending.allocations(0).bytes(), 4096u);
  EXPECT_EQ(pending.allocations(0).ipc_handle().size(), 64u);

  v1::RegisterCuda next = registry->NewMessage();
  const auto second = registry->Locate(At(0x10000), 4096, next);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->allocation_id(), 1u);
  EXPECT_EQ(second->offset(), 0u);
  EXPECT_EQ(next.allocations_size(), 0) << "registered once, never per operation";
}

TEST_F(CudaRegistryTest, MemoryFreedAndAllocatedAgainAtTheSameAddressIsRegisteredAnew) {
  fake_.Allocate(0x20000, 1024);
  auto registry = Create();
  v1::RegisterCuda pending;
  ASSERT_TRUE(registry->Locate(At(0x20000), 8, pending).ok());
  fake_.Allocate(0x20000, 2048);  // a new buffer id at the same base
  v1::RegisterCuda again;
  const auto range = registry->Locate(At(0x20000), 8, again);
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->allocation_id(), 2u);
  EXPECT_THAT(again.unregister(), ElementsAre(1u)) << "the daemon's old mapping is stale";
  ASSERT_EQ(again.allocations_size(), 1);
  EXPECT_EQ(again.allocations(0).bytes(), 2048u);
}

TEST_F(CudaRegistryTest, SaysWhereATensorCannotBe) {
  fake_.Allocate(0x30000, 100);
  fake_.Allocate(0x40000, 100, /*device=*/1);
  fake_.Allocate(0x50000, 100);
  fake_.allocations[0x50000].exportable = false;
  auto registry = Create();
  v1::RegisterCuda pending;
  EXPECT_THAT(registry->Locate(At(0x90000), 4, pending).status().message(),
              HasSubstr("not in CUDA device memory"));
  EXPECT_THAT(registry->Locate(At(0x30010), 91, pending).status().message(),
              HasSubstr("91 bytes run past the end of its CUDA allocation (84 bytes left"));
  EXPECT_THAT(registry->Locate(At(0x40000), 4, pending).status().message(),
              HasSubstr("lies on CUDA device 1 but this client uses device 0"));
  EXPECT_THAT(registry->Locate(At(0x50000), 4, pending).status().message(),
              AllOf(HasSubstr("cuIpcGetMemHandle: invalid argument"), HasSubstr("cudaMalloc")));
  EXPECT_EQ(pending.allocations_size(), 0);

  fake_.current = reinterpret_cast<cuda::Context>(0xc1);
  EXPECT_THAT(registry->Locate(At(0x30000), 4, pending).status().message(),
              HasSubstr("not the one this client uses"));
}

TEST_F(CudaRegistryTest, NeedsACurrentContext) {
  fake_.current = nullptr;
  const auto registry = CudaRegistry::Create(driver_, 8);
  ASSERT_EQ(registry.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(registry.status().message(), HasSubstr("cudaSetDevice"));
}

TEST_F(CudaRegistryTest, TheEventPoolGrowsAndReusesOnlyFreeSlots) {
  auto registry = Create(/*max_slots=*/12);
  v1::RegisterCuda pending;
  const auto first = registry->AcquireSlot(pending);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->first, 0u);
  EXPECT_EQ(first->second, 1u);
  EXPECT_EQ(pending.ready_events_size(), 8);
  EXPECT_EQ(pending.done_events_size(), 8);
  EXPECT_EQ(fake_.events_created, 16);

  std::vector<uint32_t> slots = {first->first};
  for (int i = 1; i < 12; ++i) {
    v1::RegisterCuda more;
    const auto slot = registry->AcquireSlot(more);
    ASSERT_TRUE(slot.ok()) << i;
    EXPECT_EQ(slot->first, static_cast<uint32_t>(i));
    EXPECT_EQ(slot->second, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(more.ready_events_size(), i == 8 ? 4 : 0) << "grown up to the limit of 12";
    slots.push_back(slot->first);
  }
  v1::RegisterCuda full;
  const auto exhausted = registry->AcquireSlot(full);
  ASSERT_EQ(exhausted.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(exhausted.status().message(), HasSubstr("all 12 CUDA event slots are held"));

  registry->ReleaseSlot(5);
  registry->ReleaseSlot(3);
  const auto reused = registry->AcquireSlot(full);
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(reused->first, 3u) << "the lowest free slot";
  EXPECT_EQ(reused->second, 13u) << "sequence numbers keep growing";
  EXPECT_EQ(registry->held_slots(), 11u);
  EXPECT_EQ(full.ready_events_size(), 0);

  registry.reset();
  EXPECT_EQ(fake_.events_destroyed, 24);
}

TEST_F(CudaRegistryTest, RecordsAndWaitsInTheCallersStream) {
  auto registry = Create();
  v1::RegisterCuda pending;
  const auto slot = registry->AcquireSlot(pending);
  ASSERT_TRUE(slot.ok());
  void* stream = reinterpret_cast<void*>(0x5);
  ASSERT_TRUE(registry->RecordReady(slot->first, stream).ok());
  ASSERT_TRUE(registry->WaitDone(slot->first, stream).ok());
  // Slot 0's ready event was created first, its done event second.
  EXPECT_THAT(fake_.calls, ElementsAre("record 256 5", "wait 5 257"));
}

TEST_F(CudaRegistryTest, UnregistersAnAllocation) {
  fake_.Allocate(0x60000, 64);
  auto registry = Create();
  v1::RegisterCuda pending;
  ASSERT_TRUE(registry->Locate(At(0x60000), 4, pending).ok());
  v1::RegisterCuda removal;
  ASSERT_TRUE(registry->Unregister(At(0x60010), removal).ok());
  EXPECT_THAT(removal.unregister(), ElementsAre(1u));
  EXPECT_EQ(registry->Unregister(At(0x60010), removal).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace collective::internal
