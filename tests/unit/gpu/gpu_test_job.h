// A job of clients on fake CUDA devices, as the GPU path's unit tests build
// it: each client's record, device, event slots and registered memory, the
// executor over a FakeDeviceBackend, and the ready tensors the coordinator
// would hand the engine.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "daemon/exec/fusion.h"
#include "daemon/gpu/gpu_executor.h"
#include "daemon/job/client_record.h"
#include "daemon/negotiation/coordinator.h"
#include "tests/unit/gpu/fake_device_backend.h"

namespace collective::daemon::gpu {

inline constexpr int kSlotsPerClient = 8;

// Where each rank's client runs: its device, and how many devices there are.
struct Layout {
  std::string name;
  std::vector<int> devices;
  int device_count;
};

inline void PrintTo(const Layout& layout, std::ostream* out) { *out << layout.name; }

inline std::vector<Layout> Layouts() {
  return {{"OneClient", {0}, 1},
          {"TwoClientsShareADevice", {0, 0}, 1},
          {"TwoDevices", {0, 1}, 2},
          {"FourClientsOnTwoDevices", {0, 0, 1, 1}, 2},
          {"InterleavedOnTwoDevices", {0, 1, 0}, 2},
          {"FourDevices", {0, 1, 2, 3}, 4}};
}

class GpuTestJob {
 public:
  struct Client {
    job::ClientRecord record;
    int device = 0;
    uint64_t next_allocation = 1;
    uint64_t next_sequence = 1;
    std::map<uint64_t, FakeDeviceBackend::Allocation> memory;
  };

  // `devices[r]` is the device of rank r; the backend has `device_count`.
  GpuTestJob(const std::vector<int>& devices, int device_count, DevicePath::Options options = {}) {
    auto backend = std::make_unique<FakeDeviceBackend>(device_count);
    backend_ = backend.get();
    path_ = std::make_unique<DevicePath>(std::move(backend), options,
                                         [this](uint64_t batch) { done_.push_back(batch); });
    executor_ = std::make_unique<GpuExecutor>(*path_, /*lane=*/1);
    for (size_t rank = 0; rank < devices.size(); ++rank) {
      auto client = std::make_unique<Client>();
      client->record.id = 100 + rank;
      client->record.topology.set_rank(static_cast<int32_t>(rank));
      client->device = devices[rank];
      v1::RegisterCuda message;
      message.set_device_uuid(backend_->Uuid(client->device));
      for (int slot = 0; slot < kSlotsPerClient; ++slot) {
        message.add_ready_events(backend_->ExportEvent(absl::StrCat("r", rank, ".ready", slot)));
        message.add_done_events(backend_->ExportEvent(absl::StrCat("r", rank, ".done", slot)));
      }
      const absl::Status registered = executor_->Register(client->record.id, message);
      EXPECT_TRUE(registered.ok()) << registered;
      clients_.push_back(std::move(client));
    }
  }

  FakeDeviceBackend& backend() { return *backend_; }
  GpuExecutor& executor() { return *executor_; }
  DevicePath& path() { return *path_; }
  Client& client(size_t rank) { return *clients_[rank]; }
  size_t size() const { return clients_.size(); }
  // 0, 1, ..., size() - 1: every rank, in order.
  std::vector<size_t> Ranks() const {
    std::vector<size_t> ranks(size());
    std::iota(ranks.begin(), ranks.end(), size_t{0});
    return ranks;
  }
  // Batch ids the executor reported done on a device, in order.
  std::vector<uint64_t>& done() { return done_; }

  // Registers `bytes` of device memory of rank `rank`; returns its id.
  uint64_t Memory(size_t rank, uint64_t bytes) {
    Client& c = client(rank);
    const FakeDeviceBackend::Allocation allocation = backend_->Allocate(c.device, bytes);
    const uint64_t id = c.next_allocation++;
    v1::RegisterCuda message;
    v1::CudaAllocation* added = message.add_allocations();
    added->set_allocation_id(id);
    added->set_ipc_handle(allocation.handle);
    added->set_bytes(bytes);
    const absl::Status registered = executor_->Register(c.record.id, message);
    EXPECT_TRUE(registered.ok()) << registered;
    c.memory[id] = allocation;
    return id;
  }
  std::byte* Data(size_t rank, uint64_t allocation) {
    return client(rank).memory.at(allocation).data;
  }

  // A CUDA request of rank `rank` reading allocation `input` and writing
  // `output` (`output_bytes` of it), in the next free event slot.
  v1::TensorRequest Request(size_t rank, v1::Collective collective, const std::string& name,
                            v1::DataType dtype, std::vector<int64_t> shape, uint64_t length,
                            uint64_t input, uint64_t output, uint64_t output_bytes) {
    Client& c = client(rank);
    v1::TensorRequest request;
    request.set_request_id(c.next_sequence);
    request.set_name(name);
    request.set_collective(collective);
    request.set_dtype(dtype);
    for (int64_t dim : shape) request.add_shape(dim);
    request.set_length(length);
    request.set_memory(v1::MEMORY_KIND_CUDA);
    request.mutable_device_input()->set_allocation_id(input);
    request.mutable_device_output()->set_allocation_id(output);
    request.mutable_device_output()->set_bytes(output_bytes);
    request.set_event_sequence(c.next_sequence);
    request.set_event_slot(static_cast<uint32_t>(c.next_sequence % kSlotsPerClient));
    ++c.next_sequence;
    return request;
  }

  // The tensor the coordinator would hand over once `requests` (of ranks
  // `ranks`, in set-rank order) were all in; each is admitted.
  negotiation::ReadyTensor Ready(const std::string& name, const std::vector<size_t>& ranks,
                                 const std::vector<v1::TensorRequest>& requests,
                                 int32_t set_size = -1) {
    negotiation::ReadyTensor tensor;
    tensor.name = name;
    tensor.set_size = set_size < 0 ? static_cast<int32_t>(ranks.size()) : set_size;
    for (size_t i = 0; i < ranks.size(); ++i) {
      Client& c = client(ranks[i]);
      const absl::Status admitted = executor_->Admit(c.record.id, requests[i]);
      EXPECT_TRUE(admitted.ok()) << admitted;
      tensor.submissions.push_back(negotiation::Submission{.client = &c.record,
                                                           .set_rank = static_cast<int32_t>(i),
                                                           .rank = c.record.topology.rank(),
                                                           .request = requests[i],
                                                           .at = Clock::now()});
    }
    tensor.first_at = tensor.ready_at = Clock::now();
    return tensor;
  }

  // Runs `tensors` as one batch, then completes every request.
  GpuExecutor::Outcome Run(std::vector<negotiation::ReadyTensor> tensors) {
    exec::FusedBatch batch;
    batch.tensors = std::move(tensors);
    const GpuExecutor::Outcome outcome = executor_->Run(batch, nullptr);
    for (const negotiation::ReadyTensor& tensor : batch.tensors) {
      for (const negotiation::Submission& submission : tensor.submissions) {
        executor_->Finish(submission.client->id, submission.request.request_id());
      }
    }
    return outcome;
  }

  // The GPU finishes its work; the executor learns of it.
  void FinishWork() {
    backend_->FinishWork();
    for (uint64_t batch : std::exchange(done_, {})) path_->OnDeviceDone(batch);
  }

 private:
  FakeDeviceBackend* backend_ = nullptr;
  std::unique_ptr<DevicePath> path_;
  std::unique_ptr<GpuExecutor> executor_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<uint64_t> done_;
};

}  // namespace collective::daemon::gpu
