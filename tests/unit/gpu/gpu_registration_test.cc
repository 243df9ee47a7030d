// daemon/gpu/gpu_executor and client_devices: what clients register (device,
// event pools, allocations; all or nothing), the admission of CUDA requests,
// mappings kept open while the GPU uses them, failures that reach every rank
// of a batch, the health checks, and the end of a job.
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/gpu/gpu_executor.h"
#include "tests/unit/gpu/gpu_test_job.h"

namespace collective::daemon::gpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A float32 sum allreduce of 4 elements of every rank, in place.
negotiation::ReadyTensor Allreduce(GpuTestJob& job, const std::string& name) {
  std::vector<v1::TensorRequest> requests;
  std::vector<size_t> ranks;
  for (size_t r = 0; r < job.size(); ++r) {
    const uint64_t memory = job.Memory(r, 16);
    v1::TensorRequest request = job.Request(r, v1::COLLECTIVE_ALLREDUCE, name,
                                            v1::DATA_TYPE_FLOAT32, {4}, 16, memory, memory, 16);
    request.set_op(v1::REDUCE_OP_SUM);
    requests.push_back(request);
    ranks.push_back(r);
  }
  return job.Ready(name, ranks, requests);
}

TEST(GpuRegistrationTest, ADeviceTheDaemonCannotSeeIsNamedWithTheOnesItCan) {
  GpuTestJob job({}, 2);
  v1::RegisterCuda message;
  message.set_device_uuid(std::string(kUuidBytes, 'z'));
  const absl::Status status = job.executor().Register(7, message);
  ASSERT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("7a7a7a"), HasSubstr("0: Fake GPU 0"), HasSubstr("1: Fake GPU 1"),
                    HasSubstr("CUDA_VISIBLE_DEVICES")));

  v1::RegisterCuda no_device;
  no_device.add_unregister(1);
  EXPECT_THAT(job.executor().Register(7, no_device).message(), HasSubstr("must name its device"));

  job.backend().FailNext("Devices", absl::UnavailableError("cudaGetDeviceCount: no driver"));
  message.set_device_uuid(job.backend().Uuid(0));
  EXPECT_THAT(job.executor().Register(7, message).message(),
              HasSubstr("collectived cannot use CUDA: cudaGetDeviceCount: no driver"));
}

TEST(GpuRegistrationTest, AClientUsesOneDevice) {
  GpuTestJob job({0}, 2);
  v1::RegisterCuda message;
  message.set_device_uuid(job.backend().Uuid(1));
  EXPECT_THAT(job.executor().Register(job.client(0).record.id, message).message(),
              HasSubstr("a client uses one device"));
}

TEST(GpuRegistrationTest, EachAllocationStandsOnItsOwn) {
  GpuTestJob job({0}, 1);
  const uint64_t client = job.client(0).record.id;
  const FakeDeviceBackend::Allocation bad = job.backend().Allocate(0, 64);
  const FakeDeviceBackend::Allocation good = job.backend().Allocate(0, 32);
  v1::RegisterCuda message;
  message.add_ready_events(job.backend().ExportEvent("extra.ready"));
  message.add_done_events(job.backend().ExportEvent("extra.done"));
  v1::CudaAllocation* allocation = message.add_allocations();
  allocation->set_allocation_id(40);
  allocation->set_ipc_handle(bad.handle);
  allocation->set_bytes(65);  // not what the mapping has
  allocation = message.add_allocations();
  allocation->set_allocation_id(41);
  allocation->set_ipc_handle(good.handle);
  allocation->set_bytes(32);
  const absl::Status status = job.executor().Register(client, message);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("65 bytes as the client sees it, but its mapping in "
                                          "collectived has 64"));
  EXPECT_EQ(job.path().open_mappings(), 1u) << "the bad one is closed again";

  // The good allocation and the new slot serve; the bad one says why not.
  v1::TensorRequest fine =
      job.Request(0, v1::COLLECTIVE_ALLREDUCE, "fine", v1::DATA_TYPE_FLOAT32, {4}, 16, 41, 41, 16);
  fine.set_event_slot(kSlotsPerClient);
  EXPECT_TRUE(job.executor().Admit(client, fine).ok());
  v1::TensorRequest refused =
      job.Request(0, v1::COLLECTIVE_ALLREDUCE, "x", v1::DATA_TYPE_FLOAT32, {4}, 16, 40, 41, 16);
  EXPECT_THAT(job.executor().Admit(client, refused).message(),
              AllOf(HasSubstr("input's allocation was not registered"), HasSubstr("65 bytes")));
}

TEST(GpuRegistrationTest, SlotsThatCouldNotBeOpenedSayWhy) {
  GpuTestJob job({0}, 1);
  const uint64_t client = job.client(0).record.id;
  v1::RegisterCuda message;
  message.add_ready_events(job.backend().ExportEvent("r"));
  message.add_done_events(job.backend().ExportEvent("d"));
  job.backend().FailNext("OpenEvent", absl::UnavailableError("cudaIpcOpenEventHandle: oops"));
  const size_t events = job.backend().open_events();
  EXPECT_THAT(job.executor().Register(client, message).message(),
              HasSubstr("CUDA event slot 8: cudaIpcOpenEventHandle: oops"));
  EXPECT_EQ(job.backend().open_events(), events) << "none of the message's slots stays open";
  const uint64_t memory = job.Memory(0, 16);
  v1::TensorRequest request = job.Request(0, v1::COLLECTIVE_ALLREDUCE, "x", v1::DATA_TYPE_FLOAT32,
                                          {4}, 16, memory, memory, 16);
  request.set_event_slot(kSlotsPerClient);
  EXPECT_THAT(job.executor().Admit(client, request).message(),
              AllOf(HasSubstr("slot 8 does not exist"),
                    HasSubstr("registering more slots failed: CUDA event slot 8")));
}

TEST(GpuRegistrationTest, EventSlotsComeInPairsAndAreBounded) {
  GpuTestJob job({0}, 1, {.max_event_slots = kSlotsPerClient + 1});
  v1::RegisterCuda unpaired;
  unpaired.add_ready_events(job.backend().ExportEvent("a"));
  EXPECT_THAT(job.executor().Register(job.client(0).record.id, unpaired).message(),
              HasSubstr("1 ready and 0 done events"));
  v1::RegisterCuda two;
  for (int i = 0; i < 2; ++i) {
    two.add_ready_events(job.backend().ExportEvent("r"));
    two.add_done_events(job.backend().ExportEvent("d"));
  }
  const absl::Status too_many = job.executor().Register(job.client(0).record.id, two);
  ASSERT_EQ(too_many.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_many.message(), HasSubstr("would have 10 slots; the limit is 9"));
}

TEST(GpuRegistrationTest, OneMappingServesEveryClientThatRegistersTheAllocation) {
  GpuTestJob job({0, 0}, 1);
  const FakeDeviceBackend::Allocation shared = job.backend().Allocate(0, 128);
  for (size_t r = 0; r < 2; ++r) {
    v1::RegisterCuda message;
    v1::CudaAllocation* allocation = message.add_allocations();
    allocation->set_allocation_id(9);
    allocation->set_ipc_handle(shared.handle);
    allocation->set_bytes(128);
    ASSERT_TRUE(job.executor().Register(job.client(r).record.id, message).ok());
  }
  EXPECT_EQ(job.backend().opened_mappings(), 1);
  EXPECT_EQ(job.path().open_mappings(), 1u);
  job.executor().Forget(job.client(0).record.id);
  EXPECT_EQ(job.backend().closed_mappings(), 0) << "client 1 still has it";
  v1::RegisterCuda unregister;
  unregister.add_unregister(9);
  ASSERT_TRUE(job.executor().Register(job.client(1).record.id, unregister).ok());
  EXPECT_EQ(job.backend().closed_mappings(), 1);
  EXPECT_EQ(job.path().open_mappings(), 0u);
}

TEST(GpuAdmissionTest, ChecksRangesAndEventSlots) {
  GpuTestJob job({0}, 1);
  const uint64_t client = job.client(0).record.id;
  const uint64_t memory = job.Memory(0, 64);
  const auto request = [&](uint64_t input, uint64_t output, uint64_t output_bytes) {
    return job.Request(0, v1::COLLECTIVE_ALLREDUCE, "x", v1::DATA_TYPE_FLOAT32, {4}, 16, input,
                       output, output_bytes);
  };
  EXPECT_THAT(job.executor().Admit(client, request(5, memory, 16)).message(),
              HasSubstr("the input names CUDA allocation 5, which is not registered"));
  v1::TensorRequest outside = request(memory, memory, 16);
  outside.mutable_device_input()->set_offset(56);
  EXPECT_THAT(job.executor().Admit(client, outside).message(),
              HasSubstr("the input (offset 56 + 16 bytes) lies outside CUDA allocation 1 of 64"));
  EXPECT_THAT(job.executor().Admit(client, request(memory, memory, 65)).message(),
              HasSubstr("the output (offset 0 + 65 bytes) lies outside"));

  const v1::TensorRequest first = request(memory, memory, 16);
  ASSERT_TRUE(job.executor().Admit(client, first).ok());
  v1::TensorRequest same_slot = request(memory, memory, 16);
  same_slot.set_event_slot(first.event_slot());
  EXPECT_THAT(job.executor().Admit(client, same_slot).message(), HasSubstr("is still held"));
  job.executor().Finish(client, same_slot.request_id());  // never admitted: frees nothing
  EXPECT_THAT(job.executor().Admit(client, same_slot).message(), HasSubstr("is still held"));
  job.executor().Finish(client, first.request_id());
  EXPECT_TRUE(job.executor().Admit(client, same_slot).ok());
  EXPECT_TRUE(job.executor().has_admitted());

  EXPECT_EQ(job.executor().Admit(555, request(memory, memory, 16)).code(),
            absl::StatusCode::kFailedPrecondition)
      << "a client that registered no device";
}

TEST(GpuFlightTest, MappingsStayOpenUntilTheGpuIsDoneWithThem) {
  GpuTestJob job({0, 1}, 2);
  negotiation::ReadyTensor tensor = Allreduce(job, "grad");
  const auto outcome = job.Run({tensor});
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_EQ(job.executor().in_flight(), 1u);
  // Both clients die while their batch is on the GPU.
  job.executor().Forget(job.client(0).record.id);
  job.executor().Forget(job.client(1).record.id);
  EXPECT_EQ(job.backend().closed_mappings(), 0);
  EXPECT_EQ(job.backend().open_events(), 0u) << "events go at once";
  job.backend().FinishWork();
  ASSERT_EQ(job.done().size(), 2u) << "one notice per device";
  EXPECT_FALSE(job.path().OnDeviceDone(job.done()[0]).has_value());
  const auto done = job.path().OnDeviceDone(job.done()[1]);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->batch, outcome.batch);
  EXPECT_EQ(job.executor().in_flight(), 0u);
  EXPECT_EQ(job.backend().closed_mappings(), 2) << "no mapping of a dead client is left behind";
  EXPECT_EQ(job.path().open_mappings(), 0u);
}

TEST(GpuFailureTest, AnNcclErrorReachesTheBatchAndBreaksTheJob) {
  GpuTestJob job({0, 1}, 2);
  negotiation::ReadyTensor a = Allreduce(job, "layer1.weight");
  negotiation::ReadyTensor b = Allreduce(job, "layer1.bias");
  job.backend().FailNext("AllReduce",
                         absl::UnavailableError("ncclAllReduce: unhandled cuda error"));
  const auto outcome = job.Run({a, b});
  ASSERT_FALSE(outcome.status.ok());
  EXPECT_TRUE(outcome.broken);
  EXPECT_THAT(outcome.status.message(),
              AllOf(HasSubstr("allreduce of 'layer1.weight' and 1 more fused tensor failed on "
                              "the GPU"),
                    HasSubstr("ncclAllReduce: unhandled cuda error")));
  EXPECT_EQ(job.executor().in_flight(), 0u);
  EXPECT_EQ(job.backend().scratch_in_use(), 0u);
}

TEST(GpuFailureTest, ACommunicatorThatCannotFormBreaksTheJob) {
  GpuTestJob job({0}, 1);
  negotiation::ReadyTensor tensor = Allreduce(job, "w");
  job.backend().FailNext("CreateCommunicator", absl::UnavailableError("ncclCommInitAll: oops"));
  const auto outcome = job.Run({tensor});
  EXPECT_TRUE(outcome.broken);
  EXPECT_THAT(outcome.status.message(),
              HasSubstr("cannot form the job's NCCL communicator: ncclCommInitAll: oops"));
}

TEST(GpuFailureTest, MemoryThatWentAwayFailsTheBatchOnly) {
  GpuTestJob job({0}, 1);
  negotiation::ReadyTensor tensor = Allreduce(job, "w");
  v1::RegisterCuda unregister;
  unregister.add_unregister(tensor.request().device_input().allocation_id());
  ASSERT_TRUE(job.executor().Register(job.client(0).record.id, unregister).ok());
  const auto outcome = job.Run({tensor});
  ASSERT_FALSE(outcome.status.ok());
  EXPECT_FALSE(outcome.broken);
  EXPECT_THAT(outcome.status.message(), HasSubstr("allreduce of 'w': the input names CUDA "
                                                  "allocation 1, which is not registered"));
}

TEST(GpuFailureTest, ADeviceThatJoinedAfterTheCommunicatorFormedIsNamed) {
  GpuTestJob job({0}, 2);
  ASSERT_TRUE(job.Run({Allreduce(job, "first")}).status.ok());
  // A client on device 1 registers now.
  v1::RegisterCuda late;
  late.set_device_uuid(job.backend().Uuid(1));
  late.add_ready_events(job.backend().ExportEvent("late.ready"));
  late.add_done_events(job.backend().ExportEvent("late.done"));
  ASSERT_TRUE(job.executor().Register(900, late).ok());
  job::ClientRecord record;
  record.id = 900;
  const FakeDeviceBackend::Allocation memory = job.backend().Allocate(1, 16);
  v1::RegisterCuda allocation;
  allocation.add_allocations()->set_allocation_id(1);
  allocation.mutable_allocations(0)->set_ipc_handle(memory.handle);
  allocation.mutable_allocations(0)->set_bytes(16);
  ASSERT_TRUE(job.executor().Register(900, allocation).ok());
  v1::TensorRequest request =
      job.Request(0, v1::COLLECTIVE_ALLREDUCE, "second", v1::DATA_TYPE_FLOAT32, {4}, 16, 1, 1, 16);
  request.set_event_slot(0);
  request.set_event_sequence(1);
  ASSERT_TRUE(job.executor().Admit(900, request).ok());
  negotiation::ReadyTensor tensor;
  tensor.name = "second";
  tensor.set_size = 1;
  tensor.submissions.push_back({.client = &record, .set_rank = 0, .rank = 5, .request = request});
  exec::FusedBatch batch;
  batch.tensors.push_back(tensor);
  const auto outcome = job.executor().Run(batch, nullptr);
  EXPECT_THAT(outcome.status.message(),
              AllOf(HasSubstr("rank 5's CUDA device 1 is not one of the devices [0]"),
                    HasSubstr("RegisterDeviceMemory")));
}

TEST(GpuHealthTest, AnAsyncNcclErrorNamesTheTensorsOnTheGpu) {
  GpuTestJob job({0, 1}, 2);
  ASSERT_TRUE(job.Run({Allreduce(job, "embedding")}).status.ok());
  EXPECT_TRUE(job.executor().Health(Clock::now()).ok());
  job.backend().SetCommunicatorError(absl::UnavailableError("remote process exited"));
  const absl::Status health = job.executor().Health(Clock::now());
  ASSERT_EQ(health.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(health.message(),
              AllOf(HasSubstr("NCCL failed on CUDA devices [0, 1]"),
                    HasSubstr("remote process exited"), HasSubstr("'embedding'")));
}

TEST(GpuHealthTest, ABatchPastTheTimeoutFailsTheJobAndIsAbortedNotAwaited) {
  GpuTestJob job({0, 1}, 2, {.timeout_seconds = 30});
  ASSERT_TRUE(job.Run({Allreduce(job, "stuck")}).status.ok());
  EXPECT_TRUE(job.executor().Health(Clock::now() + std::chrono::seconds(29)).ok());
  const absl::Status late = job.executor().Health(Clock::now() + std::chrono::seconds(31));
  ASSERT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(late.message(), AllOf(HasSubstr("'stuck' did not finish within 30 s"),
                                    HasSubstr("gpu_timeout_seconds")));

  job.executor().EndJob();
  EXPECT_EQ(job.backend().communicators_aborted(), 1) << "work on the GPU: aborted";
  EXPECT_EQ(job.backend().streams_abandoned(), 1);
  EXPECT_EQ(job.executor().in_flight(), 0u);
  EXPECT_TRUE(job.executor().Health(Clock::now() + std::chrono::hours(1)).ok())
      << "an aborted batch no longer counts";
  for (size_t r = 0; r < job.size(); ++r) job.executor().Forget(job.client(r).record.id);
  EXPECT_EQ(job.backend().closed_mappings(), 0) << "the GPU may still touch them";
  job.FinishWork();  // it finished after all
  EXPECT_EQ(job.path().open_mappings(), 0u);
}

TEST(GpuHealthTest, AJobThatEndsQuietlyDestroysItsCommunicator) {
  GpuTestJob job({0}, 1);
  ASSERT_TRUE(job.Run({Allreduce(job, "w")}).status.ok());
  job.FinishWork();
  job.executor().EndJob();
  EXPECT_EQ(job.backend().communicators_destroyed(), 1);
  EXPECT_EQ(job.backend().communicators_aborted(), 0);
  ASSERT_TRUE(job.Run({Allreduce(job, "next")}).status.ok());
  EXPECT_EQ(job.backend().communicators_created(), 2) << "the next job forms its own";
}

TEST(GpuNotBuiltTest, EveryCudaRequestSaysTheDaemonWasBuiltWithoutCuda) {
  DevicePath path(nullptr, {}, nullptr);
  GpuExecutor executor(path, 1);
  EXPECT_FALSE(executor.built());
  const absl::Status registered = executor.Register(1, v1::RegisterCuda());
  EXPECT_EQ(registered.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(registered.message(), HasSubstr("built without them"));
  EXPECT_EQ(executor.Admit(1, v1::TensorRequest()).code(), absl::StatusCode::kUnimplemented);
  executor.Forget(1);
  executor.EndJob();
}

}  // namespace
}  // namespace collective::daemon::gpu
