#include "daemon/gpu/gpu_executor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/exec/ops/collective_op.h"
#include "daemon/gpu/device_aliasing.h"

namespace collective::daemon::gpu {
namespace {

constexpr char kNotBuilt[] =
    "CUDA tensors need a collectived built with CUDA and NCCL; this one was built without them";

// "'a'" or "'a' and 3 more fused tensors", for errors about a batch.
std::string DescribeBatch(const exec::FusedBatch& batch) {
  std::string text = absl::StrCat("'", batch.tensors.front().name, "'");
  if (batch.tensors.size() > 1) {
    absl::StrAppend(&text, " and ", batch.tensors.size() - 1, " more fused tensor",
                    batch.tensors.size() > 2 ? "s" : "");
  }
  return text;
}

}  // namespace

GpuExecutor::GpuExecutor(DevicePath& path, uint64_t lane) : path_(path), lane_(lane) {
  if (path_.built()) {
    devices_ = std::make_unique<ClientDevices>(
        path_.opener(), path_.cache(),
        ClientDevices::Limits{.max_event_slots = path_.options().max_event_slots});
  }
}

GpuExecutor::~GpuExecutor() {
  EndJob();
  devices_.reset();
  path_.EndLane(lane_);
}

absl::Status GpuExecutor::Register(uint64_t client, const v1::RegisterCuda& message) {
  if (!built()) return absl::UnimplementedError(kNotBuilt);
  return devices_->Register(client, message);
}

absl::Status GpuExecutor::Admit(uint64_t client, const v1::TensorRequest& request) {
  if (!built()) return absl::UnimplementedError(kNotBuilt);
  RETURN_IF_ERROR(
      devices_->Resolve(client, request.device_input(), request.length(), "input").status());
  RETURN_IF_ERROR(
      devices_->Resolve(client, request.device_output(), request.device_output().bytes(), "output")
          .status());
  EventPool* events = devices_->Events(client);
  if (absl::Status acquired = events->Acquire(request.event_slot(), request.event_sequence());
      !acquired.ok()) {
    const absl::Status why = devices_->EventsFailure(client);
    if (why.ok() || request.event_slot() < events->size()) return acquired;
    return absl::Status(
        acquired.code(),
        absl::StrCat(acquired.message(), "; registering more slots failed: ", why.message()));
  }
  admitted_[{client, request.request_id()}] = request.event_slot();
  return absl::OkStatus();
}

void GpuExecutor::Finish(uint64_t client, uint64_t request_id) {
  auto it = admitted_.find({client, request_id});
  if (it == admitted_.end()) return;
  if (EventPool* events = devices_->Events(client)) events->Release(it->second);
  admitted_.erase(it);
}

void GpuExecutor::Forget(uint64_t client) {
  if (!built()) return;
  absl::erase_if(admitted_, [client](const auto& entry) { return entry.first.first == client; });
  devices_->Forget(client);
}

absl::Status GpuExecutor::Check(const negotiation::ReadyTensor& tensor) {
  const exec::ops::CollectiveOp& op = *exec::ops::OpFor(tensor.request());
  for (size_t i = 0; i < tensor.submissions.size(); ++i) {
    const v1::TensorRequest& request = tensor.submissions[i].request;
    const uint64_t needed = op.ResultOf(tensor, i).bytes;
    if (request.device_output().bytes() < needed) {
      return absl::InvalidArgumentError(
          absl::StrCat(CollectiveName(request.collective()), " of '", tensor.name, "': rank ",
                       tensor.submissions[i].rank, "'s output holds ",
                       request.device_output().bytes(), " bytes; its result needs ", needed));
    }
  }
  return CheckAliasing(tensor);
}

absl::Status GpuExecutor::CheckAcrossNodes(const negotiation::ReadyTensor& everyone) {
  const v1::Collective collective = everyone.request().collective();
  if (collective != v1::COLLECTIVE_ALLREDUCE) {
    return absl::UnimplementedError(absl::StrCat(
        CollectiveName(collective), " of CUDA tensor '", everyone.name,
        "' spans nodes; across nodes the GPU path runs allreduce only (single-node jobs run "
        "every collective on the GPU; CPU tensors run every collective across nodes)"));
  }
  if (everyone.process_set_id != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "allreduce of CUDA tensor '", everyone.name, "' on process set ", everyone.process_set_id,
        " spans nodes; across nodes the GPU path runs on the global process set only"));
  }
  if (static_cast<int32_t>(everyone.submissions.size()) < everyone.set_size) {
    return absl::UnimplementedError(absl::StrCat(
        "allreduce of CUDA tensor '", everyone.name,
        "' spans nodes while ranks have joined; across nodes the GPU path needs every rank"));
  }
  return Check(everyone);
}

absl::StatusOr<const Communicator*> GpuExecutor::LocalCommunicator() {
  if (local_.has_value()) return &*local_;
  Communicator comm;
  comm.devices = devices_->Devices();
  comm.ranks = static_cast<int>(comm.devices.size());
  ASSIGN_OR_RETURN(
      comm.id,
      backend().CreateCommunicator(
          {.devices = comm.devices, .ranks = comm.ranks, .first_rank = 0, .unique_id = ""}));
  log::Nccl().info("NCCL communicator over this node's CUDA devices [{}]",
                   absl::StrJoin(comm.devices, ", "));
  local_ = std::move(comm);
  return &*local_;
}

absl::StatusOr<const Communicator*> GpuExecutor::GlobalCommunicator(const ShareLayout& share) {
  if (global_.has_value()) return &*global_;
  Communicator comm;
  comm.devices = devices_->Devices();
  comm.node_local = false;
  ASSIGN_OR_RETURN(const GlobalLayout layout, share(static_cast<int>(comm.devices.size()),
                                                    [this] { return backend().NewUniqueId(); }));
  comm.ranks = layout.ranks;
  comm.first_rank = layout.first_rank;
  ASSIGN_OR_RETURN(comm.id, backend().CreateCommunicator({.devices = comm.devices,
                                                          .ranks = comm.ranks,
                                                          .first_rank = comm.first_rank,
                                                          .unique_id = layout.unique_id}));
  log::Nccl().info(
      "NCCL communicator of {} ranks across the nodes; this node's devices [{}] are "
      "ranks {}..{}",
      comm.ranks, absl::StrJoin(comm.devices, ", "), comm.first_rank,
      comm.first_rank + static_cast<int>(comm.devices.size()) - 1);
  global_ = std::move(comm);
  return &*global_;
}

absl::StatusOr<std::vector<DeviceTensor>> GpuExecutor::Resolve(const exec::FusedBatch& batch,
                                                               const Communicator& comm,
                                                               Flight& flight) {
  std::vector<DeviceTensor> tensors;
  for (const negotiation::ReadyTensor& tensor : batch.tensors) {
    DeviceTensor& resolved = tensors.emplace_back();
    resolved.tensor = &tensor;
    flight.tensors.push_back(tensor.name);
    for (const negotiation::Submission& submission : tensor.submissions) {
      const uint64_t client = submission.client->id;
      const v1::TensorRequest& request = submission.request;
      const int index = comm.IndexOf(devices_->DeviceOf(client).value_or(-1));
      if (index < 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "rank ", submission.rank, "'s CUDA device ", devices_->DeviceOf(client).value_or(-1),
            " is not one of the devices [", absl::StrJoin(comm.devices, ", "),
            "] of the job's NCCL communicator, which formed when the first CUDA collective ran; "
            "every rank must register its CUDA memory (Client::RegisterDeviceMemory) before"));
      }
      DeviceMember member{.device = index};
      ASSIGN_OR_RETURN(member.input, devices_->Resolve(client, request.device_input(),
                                                       request.length(), "input"));
      ASSIGN_OR_RETURN(member.output, devices_->Resolve(client, request.device_output(),
                                                        request.device_output().bytes(), "output"));
      resolved.members.push_back(member);
      for (uint64_t id :
           {request.device_input().allocation_id(), request.device_output().allocation_id()}) {
        if (id == 0) continue;  // an empty range: no mapping to hold
        flight.handles.push_back(*devices_->HandleOf(client, id));
      }
    }
  }
  return tensors;
}

absl::Status GpuExecutor::Issue(const exec::FusedBatch& batch, const Communicator& comm,
                                std::span<const DeviceTensor> tensors) {
  const auto events = [&](const DeviceTensor& tensor, size_t i) {
    const negotiation::Submission& submission = tensor.tensor->submissions[i];
    return devices_->Events(submission.client->id)->slot(submission.request.event_slot());
  };
  for (const DeviceTensor& tensor : tensors) {
    for (size_t i = 0; i < tensor.members.size(); ++i) {
      RETURN_IF_ERROR(
          backend().WaitEvent(comm.devices[tensor.members[i].device], events(tensor, i).ready));
    }
  }
  DeviceIssue issue(backend(), comm);
  absl::Status status;
  switch (batch.tensors.front().request().collective()) {
    case v1::COLLECTIVE_ALLREDUCE:
      status = IssueAllreduce(issue, tensors);
      break;
    case v1::COLLECTIVE_REDUCESCATTER:
      status = IssueReducescatter(issue, tensors);
      break;
    case v1::COLLECTIVE_BROADCAST:
      status = IssueBroadcast(issue, tensors);
      break;
    case v1::COLLECTIVE_ALLGATHER:
      status = IssueAllgather(issue, tensors);
      break;
    case v1::COLLECTIVE_ALLTOALL:
      status = IssueAlltoall(issue, tensors);
      break;
    case v1::COLLECTIVE_REDUCE:
      status = IssueReduce(issue, tensors);
      break;
    case v1::COLLECTIVE_GATHER:
      status = IssueGather(issue, tensors);
      break;
    case v1::COLLECTIVE_SCATTER:
      status = IssueScatter(issue, tensors);
      break;
    case v1::COLLECTIVE_SEND:
    case v1::COLLECTIVE_RECV:
      status = IssueMessages(issue, tensors);
      break;
    default:
      status = absl::InternalError("not a data collective");
  }
  if (absl::Status freed = issue.FreeScratch(); status.ok()) status = freed;
  RETURN_IF_ERROR(status);
  for (const DeviceTensor& tensor : tensors) {
    for (size_t i = 0; i < tensor.members.size(); ++i) {
      RETURN_IF_ERROR(
          backend().RecordEvent(comm.devices[tensor.members[i].device], events(tensor, i).done));
    }
  }
  return absl::OkStatus();
}

GpuExecutor::Outcome GpuExecutor::Run(const exec::FusedBatch& batch, const ShareLayout& share) {
  Outcome outcome;
  outcome.started = Clock::now();
  const std::string what = absl::StrCat(
      CollectiveName(batch.tensors.front().request().collective()), " of ", DescribeBatch(batch));
  if (!built()) {
    outcome.status = absl::UnimplementedError(kNotBuilt);
    return outcome;
  }
  absl::StatusOr<const Communicator*> comm =
      batch.tensors.front().across_nodes ? GlobalCommunicator(share) : LocalCommunicator();
  if (!comm.ok()) {
    outcome.status = Annotate(comm.status(), absl::StrCat(what,
                                                          ": cannot form the job's NCCL "
                                                          "communicator"));
    outcome.broken = true;
    return outcome;
  }
  Flight flight;
  absl::StatusOr<std::vector<DeviceTensor>> tensors = Resolve(batch, **comm, flight);
  if (!tensors.ok()) {
    outcome.status = Annotate(tensors.status(), what);
    // Across nodes the other nodes' NCCL calls wait for this node's part:
    // the job cannot go on (and FailJob tells them why).
    outcome.broken = batch.tensors.front().across_nodes;
    return outcome;
  }
  if (absl::Status issued = Issue(batch, **comm, *tensors); !issued.ok()) {
    outcome.status = Annotate(issued, absl::StrCat(what, " failed on the GPU"));
    outcome.broken = true;
    // Part of the batch may be queued: destroying the communicators would
    // wait for it, aborting does not.
    DropCommunicators(/*abort=*/true);
    return outcome;
  }
  flight.started = outcome.started;
  outcome.batch = path_.Track(lane_, std::move(flight), (*comm)->devices);
  return outcome;
}

absl::Status GpuExecutor::Health(Clock::time_point now) {
  if (!built()) return absl::OkStatus();
  for (const std::optional<Communicator>* comm : {&local_, &global_}) {
    if (!comm->has_value()) continue;
    if (absl::Status error = backend().CommunicatorError((*comm)->id); !error.ok()) {
      const std::vector<std::string> tensors = path_.Tensors(lane_);
      return absl::UnavailableError(absl::StrCat(
          "NCCL failed on CUDA devices [", absl::StrJoin((*comm)->devices, ", "),
          "]: ", error.message(),
          tensors.empty()
              ? ""
              : absl::StrCat(" (tensors on the GPU: '", absl::StrJoin(tensors, "', '"), "')")));
    }
  }
  const Flight* oldest = path_.Oldest(lane_);
  const double timeout = path_.options().timeout_seconds;
  if (oldest != nullptr && now - oldest->started > std::chrono::duration<double>(timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the GPU work of '", absl::StrJoin(oldest->tensors, "', '"), "' did not finish within ",
        timeout,
        " s (gpu_timeout_seconds): a rank's CUDA stream may never have produced its input, or "
        "NCCL hangs"));
  }
  return absl::OkStatus();
}

void GpuExecutor::DropCommunicators(bool abort) {
  if (!built()) return;
  DeviceBackend& devices = backend();
  for (std::optional<Communicator>* comm : {&local_, &global_}) {
    if (!comm->has_value()) continue;
    if (abort) {
      devices.AbortCommunicator((*comm)->id);
    } else {
      devices.DestroyCommunicator((*comm)->id);
    }
    comm->reset();
  }
  if (abort) devices.AbandonStreams();
}

void GpuExecutor::EndJob() {
  const size_t flying = in_flight();
  if (flying > 0) {
    log::Nccl().warn("aborting the job's NCCL communicators with {} batch(es) still on the GPU",
                     flying);
  }
  DropCommunicators(flying > 0);
  path_.Abandon(lane_);
}

}  // namespace collective::daemon::gpu
