// A DeviceBackend that does in host memory what the CUDA backend does on the
// GPU, for the tests of the GPU path on machines without one: "device"
// allocations and events the test creates and exports as IPC handles, the
// device reduction kernel's own arithmetic (device_math.h, compiled for the
// CPU), and NCCL's collectives matched across the devices of a communicator
// as NCCL matches them (the i-th collective of each device's group, sends and
// receives pairwise in order). Work runs when it is queued; completion
// callbacks wait until the test lets the "GPU" finish. It records what it
// was asked, in order, and fails a named call on request.
//
// The daemon's engine thread calls it while a test thread reads its
// counters and finishes its work: those are thread-safe; the test prepares
// memory and events before it hands their handles to the engine.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "daemon/gpu/device_backend.h"

namespace collective::daemon::gpu {

class FakeDeviceBackend final : public DeviceBackend {
 public:
  explicit FakeDeviceBackend(int devices);
  ~FakeDeviceBackend() override;

  // --- The test's side.
  struct Allocation {
    std::string handle;  // kIpcHandleBytes
    std::byte* data = nullptr;
    uint64_t bytes = 0;
  };
  // Device memory of a client on `device`, zeroed.
  Allocation Allocate(int device, uint64_t bytes);
  // An interprocess event's handle; `label` names it in the log.
  std::string ExportEvent(const std::string& label);
  std::string Uuid(int device) const;

  // Everything asked of the devices since the last TakeLog, in order:
  // "wait c0.ready0 @0", "record c0.done0 @0", "reduce @1", "copy 2 @0",
  // "allreduce @0", "broadcast root 1 @0", "reduce-to 0 @1", "send 1 @0",
  // "recv 0 @1", "scratch @0", "free @0".
  std::vector<std::string> TakeLog();
  // The next call named `call` ("AllReduce", "OpenMemory", ...) fails with
  // `status`.
  void FailNext(const std::string& call, absl::Status status);
  void SetCommunicatorError(absl::Status status) { async_error_ = std::move(status); }
  // Runs every pending completion callback, as the GPU finishing its work;
  // with `lane`, only that lane's (a job's streams).
  size_t FinishWork();
  size_t FinishWork(std::optional<uint64_t> lane);

  int opened_mappings() const { return opened_; }
  int closed_mappings() const { return closed_; }
  size_t open_events() const { return events_.size(); }
  size_t scratch_in_use() const { return scratch_.size(); }
  int communicators_created() const { return created_; }
  int communicators_aborted() const { return aborted_; }
  int communicators_destroyed() const { return destroyed_; }
  int streams_abandoned() const;
  // The lanes whose streams were abandoned, in order.
  std::vector<uint64_t> abandoned_lanes() const;

  // --- DeviceBackend.
  absl::StatusOr<std::vector<DeviceInfo>> Devices() override;
  absl::StatusOr<Mapping> OpenMemory(int device, absl::string_view ipc_handle) override;
  absl::Status CloseMemory(int device, std::byte* base) override;
  absl::StatusOr<EventId> OpenEvent(int device, absl::string_view ipc_handle) override;
  void CloseEvent(EventId event) override;
  absl::StatusOr<std::string> NewUniqueId() override;
  absl::StatusOr<CommId> CreateCommunicator(const CommunicatorSpec& spec) override;
  absl::Status CommunicatorError(CommId comm) override;
  void AbortCommunicator(CommId comm) override;
  void DestroyCommunicator(CommId comm) override;
  void UseLane(uint64_t lane) override { lane_ = lane; }
  void AbandonStreams() override;
  void EndLane(uint64_t) override {}
  absl::StatusOr<std::byte*> AllocateScratch(int device, uint64_t bytes) override;
  absl::Status FreeScratch(int device, std::byte* buffer) override;
  absl::Status WaitEvent(int device, EventId event) override;
  absl::Status RecordEvent(int device, EventId event) override;
  absl::Status Copy(int device, std::span<const DeviceCopy> copies) override;
  absl::Status Reduce(int device, const exec::ReduceSpec& spec, std::span<const void* const> inputs,
                      void* out, uint64_t count) override;
  absl::Status GroupStart() override;
  absl::Status GroupEnd() override;
  absl::Status AllReduce(CommId comm, int device, const void* send, void* recv, uint64_t count,
                         v1::DataType dtype, v1::ReduceOp op) override;
  absl::Status Broadcast(CommId comm, int device, const void* send, void* recv, uint64_t bytes,
                         int root) override;
  absl::Status ReduceToRoot(CommId comm, int device, const void* send, void* recv, uint64_t count,
                            v1::DataType dtype, v1::ReduceOp op, int root) override;
  absl::Status Send(CommId comm, int device, const void* buffer, uint64_t bytes, int peer) override;
  absl::Status Recv(CommId comm, int device, void* buffer, uint64_t bytes, int peer) override;
  absl::Status NotifyWhenDone(int device, std::function<void()> done) override;

 private:
  enum class Kind { kAllReduce, kBroadcast, kReduce, kSend, kRecv };
  // One device's part of a collective (or a send or receive), queued until
  // its group ends.
  struct Call {
    Kind kind;
    CommId comm;
    int device;
    const void* send;
    void* recv;
    uint64_t count;  // elements (bytes for broadcast, send, recv)
    v1::DataType dtype;
    v1::ReduceOp op;
    int root_or_peer;
  };
  struct Communicator {
    CommunicatorSpec spec;
  };

  absl::Status Injected(const std::string& call);
  absl::Status Queue(Call call);
  absl::Status RunGroup(std::vector<Call> calls);
  absl::Status RunCollective(const std::vector<const Call*>& parts, const Communicator& comm);
  void Log(std::string entry) { log_.push_back(std::move(entry)); }

  const int devices_;
  std::vector<std::unique_ptr<std::byte[]>> memory_;
  absl::flat_hash_map<std::string, Allocation> allocations_;       // by handle
  absl::flat_hash_map<std::string, std::string> exported_events_;  // handle -> label
  absl::flat_hash_map<EventId, std::string> events_;               // open: id -> label
  std::map<std::byte*, std::unique_ptr<std::byte[]>> scratch_;
  absl::flat_hash_map<CommId, Communicator> comms_;
  std::vector<Call> group_;
  int group_depth_ = 0;
  std::map<std::string, absl::Status> failures_;
  absl::Status async_error_;
  uint64_t lane_ = 0;  // engine thread
  mutable std::mutex pending_mutex_;
  // With the lane whose streams they follow.
  std::vector<std::pair<uint64_t, std::function<void()>>> pending_;
  std::vector<uint64_t> abandoned_lanes_;
  std::vector<std::string> log_;
  EventId next_event_ = 1;
  CommId next_comm_ = 1;
  uint64_t next_handle_ = 1;
  std::atomic<int> opened_ = 0;
  std::atomic<int> closed_ = 0;
  std::atomic<int> created_ = 0;
  std::atomic<int> aborted_ = 0;
  std::atomic<int> destroyed_ = 0;
};

}  // namespace collective::daemon::gpu
