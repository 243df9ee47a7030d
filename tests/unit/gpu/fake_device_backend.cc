#include "tests/unit/gpu/fake_device_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "daemon/gpu/reduce_params.h"

namespace collective::daemon::gpu {
namespace {

// Garbage, so that nothing relies on fresh scratch memory being zero.
constexpr std::byte kScratchFill{0xa5};

std::string Handle(const char* kind, uint64_t number) {
  std::string handle = absl::StrCat(kind, "-", number);
  handle.resize(kIpcHandleBytes, '\0');
  return handle;
}

}  // namespace

FakeDeviceBackend::FakeDeviceBackend(int devices) : devices_(devices) {}

FakeDeviceBackend::~FakeDeviceBackend() = default;

FakeDeviceBackend::Allocation FakeDeviceBackend::Allocate(int device, uint64_t bytes) {
  memory_.push_back(std::make_unique<std::byte[]>(bytes));
  std::memset(memory_.back().get(), 0, bytes);
  Allocation allocation{Handle("mem", next_handle_++), memory_.back().get(), bytes};
  allocation.handle[kIpcHandleBytes - 1] = static_cast<char>(device);
  allocations_[allocation.handle] = allocation;
  return allocation;
}

std::string FakeDeviceBackend::ExportEvent(const std::string& label) {
  std::string handle = Handle("event", next_handle_++);
  exported_events_[handle] = label;
  return handle;
}

std::string FakeDeviceBackend::Uuid(int device) const {
  std::string uuid = absl::StrCat("fake-gpu-", device);
  uuid.resize(kUuidBytes, '\0');
  return uuid;
}

std::vector<std::string> FakeDeviceBackend::TakeLog() { return std::exchange(log_, {}); }

void FakeDeviceBackend::FailNext(const std::string& call, absl::Status status) {
  failures_[call] = std::move(status);
}

size_t FakeDeviceBackend::FinishWork() { return FinishWork(std::nullopt); }

size_t FakeDeviceBackend::FinishWork(std::optional<uint64_t> lane) {
  std::vector<std::function<void()>> finished;
  {
    std::lock_guard lock(pending_mutex_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (lane.has_value() && it->first != *lane) {
        ++it;
        continue;
      }
      finished.push_back(std::move(it->second));
      it = pending_.erase(it);
    }
  }
  for (auto& done : finished) done();
  return finished.size();
}

void FakeDeviceBackend::AbandonStreams() {
  std::lock_guard lock(pending_mutex_);
  abandoned_lanes_.push_back(lane_);
}

std::vector<uint64_t> FakeDeviceBackend::abandoned_lanes() const {
  std::lock_guard lock(pending_mutex_);
  return abandoned_lanes_;
}

int FakeDeviceBackend::streams_abandoned() const {
  std::lock_guard lock(pending_mutex_);
  return static_cast<int>(abandoned_lanes_.size());
}

absl::Status FakeDeviceBackend::Injected(const std::string& call) {
  auto it = failures_.find(call);
  if (it == failures_.end()) return absl::OkStatus();
  absl::Status status = std::move(it->second);
  failures_.erase(it);
  return status;
}

absl::StatusOr<std::vector<DeviceInfo>> FakeDeviceBackend::Devices() {
  RETURN_IF_ERROR(Injected("Devices"));
  std::vector<DeviceInfo> devices;
  for (int d = 0; d < devices_; ++d) {
    devices.push_back({.ordinal = d, .uuid = Uuid(d), .name = absl::StrCat("Fake GPU ", d)});
  }
  return devices;
}

absl::StatusOr<Mapping> FakeDeviceBackend::OpenMemory(int device, absl::string_view ipc_handle) {
  RETURN_IF_ERROR(Injected("OpenMemory"));
  auto it = allocations_.find(ipc_handle);
  if (it == allocations_.end()) return absl::InvalidArgumentError("invalid resource handle");
  if (static_cast<int>(ipc_handle.back()) != device) {
    return absl::InvalidArgumentError("the allocation lives on another device");
  }
  ++opened_;
  return Mapping{it->second.data, it->second.bytes};
}

absl::Status FakeDeviceBackend::CloseMemory(int, std::byte*) {
  ++closed_;
  return absl::OkStatus();
}

absl::StatusOr<EventId> FakeDeviceBackend::OpenEvent(int, absl::string_view ipc_handle) {
  RETURN_IF_ERROR(Injected("OpenEvent"));
  auto it = exported_events_.find(ipc_handle);
  if (it == exported_events_.end()) return absl::InvalidArgumentError("invalid event handle");
  const EventId id = next_event_++;
  events_[id] = it->second;
  return id;
}

void FakeDeviceBackend::CloseEvent(EventId event) { events_.erase(event); }

absl::StatusOr<std::string> FakeDeviceBackend::NewUniqueId() { return std::string(128, 'u'); }

absl::StatusOr<CommId> FakeDeviceBackend::CreateCommunicator(const CommunicatorSpec& spec) {
  RETURN_IF_ERROR(Injected("CreateCommunicator"));
  ++created_;
  const CommId id = next_comm_++;
  comms_[id] = Communicator{spec};
  return id;
}

absl::Status FakeDeviceBackend::CommunicatorError(CommId) { return async_error_; }

void FakeDeviceBackend::AbortCommunicator(CommId comm) {
  ++aborted_;
  comms_.erase(comm);
}

void FakeDeviceBackend::DestroyCommunicator(CommId comm) {
  ++destroyed_;
  comms_.erase(comm);
}

absl::StatusOr<std::byte*> FakeDeviceBackend::AllocateScratch(int device, uint64_t bytes) {
  RETURN_IF_ERROR(Injected("AllocateScratch"));
  auto buffer = std::make_unique<std::byte[]>(std::max<uint64_t>(bytes, 1));
  std::fill_n(buffer.get(), bytes, kScratchFill);
  std::byte* data = buffer.get();
  scratch_[data] = std::move(buffer);
  Log(absl::StrCat("scratch @", device));
  return data;
}

absl::Status FakeDeviceBackend::FreeScratch(int device, std::byte* buffer) {
  if (scratch_.erase(buffer) == 0) return absl::InternalError("freeing unknown scratch");
  Log(absl::StrCat("free @", device));
  return absl::OkStatus();
}

absl::Status FakeDeviceBackend::WaitEvent(int device, EventId event) {
  RETURN_IF_ERROR(Injected("WaitEvent"));
  auto it = events_.find(event);
  if (it == events_.end()) return absl::InternalError("waiting on an unknown event");
  Log(absl::StrCat("wait ", it->second, " @", device));
  return absl::OkStatus();
}

absl::Status FakeDeviceBackend::RecordEvent(int device, EventId event) {
  RETURN_IF_ERROR(Injected("RecordEvent"));
  auto it = events_.find(event);
  if (it == events_.end()) return absl::InternalError("recording an unknown event");
  Log(absl::StrCat("record ", it->second, " @", device));
  return absl::OkStatus();
}

absl::Status FakeDeviceBackend::Copy(int device, std::span<const DeviceCopy> copies) {
  RETURN_IF_ERROR(Injected("Copy"));
  for (const DeviceCopy& copy : copies) std::memmove(copy.destination, copy.source, copy.bytes);
  Log(absl::StrCat("copy ", copies.size(), " @", device));
  return absl::OkStatus();
}

absl::Status FakeDeviceBackend::Reduce(int device, const exec::ReduceSpec& spec,
                                       std::span<const void* const> inputs, void* out,
                                       uint64_t count) {
  RETURN_IF_ERROR(Injected("Reduce"));
  ASSIGN_OR_RETURN(const math::ReduceParams params, ReduceParamsOf(spec, inputs, out, count));
  if (!ReduceOnHost(params)) {
    return absl::InvalidArgumentError("no device kernel for this dtype and op");
  }
  Log(absl::StrCat("reduce @", device));
  return absl::OkStatus();
}

absl::Status FakeDeviceBackend::GroupStart() {
  ++group_depth_;
  return absl::OkStatus();
}

absl::Status FakeDeviceBackend::GroupEnd() {
  if (group_depth_ == 0) return absl::InternalError("ncclGroupEnd without ncclGroupStart");
  if (--group_depth_ > 0) return absl::OkStatus();
  RETURN_IF_ERROR(Injected("GroupEnd"));
  return RunGroup(std::exchange(group_, {}));
}

absl::Status FakeDeviceBackend::Queue(Call call) {
  auto comm = comms_.find(call.comm);
  if (comm == comms_.end()) return absl::InternalError("an unknown communicator");
  if (group_depth_ == 0 && comm->second.spec.devices.size() > 1) {
    return absl::InternalError(
        "an NCCL call outside a group on a communicator of several devices of one process "
        "(NCCL would hang)");
  }
  group_.push_back(call);
  return group_depth_ == 0 ? RunGroup(std::exchange(group_, {})) : absl::OkStatus();
}

absl::Status FakeDeviceBackend::AllReduce(CommId comm, int device, const void* send, void* recv,
                                          uint64_t count, v1::DataType dtype, v1::ReduceOp op) {
  RETURN_IF_ERROR(Injected("AllReduce"));
  Log(absl::StrCat("allreduce @", device));
  return Queue({Kind::kAllReduce, comm, device, send, recv, count, dtype, op, 0});
}

absl::Status FakeDeviceBackend::Broadcast(CommId comm, int device, const void* send, void* recv,
                                          uint64_t bytes, int root) {
  RETURN_IF_ERROR(Injected("Broadcast"));
  Log(absl::StrCat("broadcast root ", root, " @", device));
  return Queue({Kind::kBroadcast, comm, device, send, recv, bytes, v1::DATA_TYPE_UINT8,
                v1::REDUCE_OP_SUM, root});
}

absl::Status FakeDeviceBackend::ReduceToRoot(CommId comm, int device, const void* send, void* recv,
                                             uint64_t count, v1::DataType dtype, v1::ReduceOp op,
                                             int root) {
  RETURN_IF_ERROR(Injected("ReduceToRoot"));
  Log(absl::StrCat("reduce-to ", root, " @", device));
  return Queue({Kind::kReduce, comm, device, send, recv, count, dtype, op, root});
}

absl::Status FakeDeviceBackend::Send(CommId comm, int device, const void* buffer, uint64_t bytes,
                                     int peer) {
  Log(absl::StrCat("send ", peer, " @", device));
  return Queue({Kind::kSend, comm, device, buffer, nullptr, bytes, v1::DATA_TYPE_UINT8,
                v1::REDUCE_OP_SUM, peer});
}

absl::Status FakeDeviceBackend::Recv(CommId comm, int device, void* buffer, uint64_t bytes,
                                     int peer) {
  Log(absl::StrCat("recv ", peer, " @", device));
  return Queue({Kind::kRecv, comm, device, nullptr, buffer, bytes, v1::DATA_TYPE_UINT8,
                v1::REDUCE_OP_SUM, peer});
}

absl::Status FakeDeviceBackend::NotifyWhenDone(int, std::function<void()> done) {
  std::lock_guard lock(pending_mutex_);
  pending_.emplace_back(lane_, std::move(done));
  return absl::OkStatus();
}

absl::Status FakeDeviceBackend::RunGroup(std::vector<Call> calls) {
  // Collectives match by position among each device's collectives on a
  // communicator; sends and receives by (sender, receiver) in order.
  std::map<CommId, std::map<int, std::vector<const Call*>>> collectives;
  std::map<std::tuple<CommId, int, int>, std::vector<const Call*>> sends;
  std::map<std::tuple<CommId, int, int>, std::vector<const Call*>> receives;
  for (const Call& call : calls) {
    const CommunicatorSpec& spec = comms_.at(call.comm).spec;
    if (spec.ranks != static_cast<int>(spec.devices.size())) {
      return absl::UnimplementedError("the fake runs communicators of one node only");
    }
    if (call.kind == Kind::kSend) {
      sends[{call.comm, call.device, spec.devices[static_cast<size_t>(call.root_or_peer)]}]
          .push_back(&call);
    } else if (call.kind == Kind::kRecv) {
      receives[{call.comm, spec.devices[static_cast<size_t>(call.root_or_peer)], call.device}]
          .push_back(&call);
    } else {
      collectives[call.comm][call.device].push_back(&call);
    }
  }
  for (const auto& [id, by_device] : collectives) {
    const Communicator& comm = comms_.at(id);
    const size_t count = by_device.begin()->second.size();
    for (int device : comm.spec.devices) {
      auto it = by_device.find(device);
      if (it == by_device.end() || it->second.size() != count) {
        return absl::InternalError(absl::StrCat("device ", device,
                                                " did not take part in every collective of the "
                                                "group (NCCL would hang)"));
      }
    }
    for (size_t i = 0; i < count; ++i) {
      std::vector<const Call*> parts;
      for (int device : comm.spec.devices) parts.push_back(by_device.at(device)[i]);
      RETURN_IF_ERROR(RunCollective(parts, comm));
    }
  }
  for (const auto& [pair, posted] : sends) {
    const std::vector<const Call*>& matching = receives[pair];
    if (matching.size() != posted.size()) {
      return absl::InternalError("sends and receives between two devices do not pair up");
    }
    for (size_t i = 0; i < posted.size(); ++i) {
      if (posted[i]->count != matching[i]->count) {
        return absl::InternalError("a send and its receive differ in size");
      }
      std::memmove(matching[i]->recv, posted[i]->send, posted[i]->count);
    }
    receives.erase(pair);
  }
  for (const auto& [pair, posted] : receives) {
    if (!posted.empty()) return absl::InternalError("a receive without its send");
  }
  return absl::OkStatus();
}

absl::Status FakeDeviceBackend::RunCollective(const std::vector<const Call*>& parts,
                                              const Communicator& comm) {
  const Call& first = *parts.front();
  for (const Call* part : parts) {
    if (part->kind != first.kind || part->count != first.count || part->dtype != first.dtype ||
        part->op != first.op || part->root_or_peer != first.root_or_peer) {
      return absl::InternalError("the devices' parts of a collective do not match");
    }
  }
  const uint64_t element = first.kind == Kind::kBroadcast ? 1 : ElementSize(first.dtype);
  std::vector<std::byte> result(std::max<uint64_t>(first.count * element, 1));
  const auto root = [&]() -> const Call& {
    return *parts[static_cast<size_t>(first.root_or_peer - comm.spec.first_rank)];
  };
  if (first.kind == Kind::kBroadcast) {
    std::memcpy(result.data(), root().send, first.count);
  } else {
    exec::ReduceSpec spec{.dtype = first.dtype, .op = first.op};
    if (first.op == v1::REDUCE_OP_AVERAGE) {
      spec.op = v1::REDUCE_OP_SUM;
      spec.divisor = comm.spec.ranks;
    }
    std::vector<const void*> inputs;
    for (const Call* part : parts) inputs.push_back(part->send);
    if (first.count > 0) exec::Reduce(spec, inputs, result.data(), first.count);
  }
  for (const Call* part : parts) {
    const bool receives = first.kind != Kind::kReduce || part == &root();
    if (receives) std::memcpy(part->recv, result.data(), first.count * element);
  }
  return absl::OkStatus();
}

}  // namespace collective::daemon::gpu
