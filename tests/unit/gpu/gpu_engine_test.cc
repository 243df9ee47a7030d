// The engine's GPU path end to end with a fake device backend: clients
// register CUDA memory and events through their submission rings (answered
// on their sessions), submit CUDA tensors,
// and get completion records whose results are in their device outputs;
// CPU and GPU tensors of one name are a mismatch every rank hears of; a
// failure on the GPU, a GPU that never finishes and a client that dies fail
// the job and leave no mapping open; two jobs use the GPU at once, and one's
// hang fails it alone; and a daemon without CUDA says so.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/unit/engine/engine_harness.h"
#include "tests/unit/gpu/fake_device_backend.h"

namespace collective::daemon::engine {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class GpuEngineTest : public EngineHarness {
 protected:
  // Starts the engine on `devices` fake GPUs (none: a build without CUDA).
  void StartWithDevices(int devices) {
    if (devices == 0) {
      Start(nullptr);
      return;
    }
    auto backend = std::make_unique<gpu::FakeDeviceBackend>(devices);
    backend_ = backend.get();
    Start(std::move(backend));
  }

  // Registers the client's device (device `device`), two event slots and
  // one allocation of `bytes` as id 1; returns the allocation's memory.
  std::byte* RegisterCuda(TestClient& client, int device, uint64_t bytes) {
    const int32_t rank = client.call->response().topology().rank();
    const gpu::FakeDeviceBackend::Allocation memory = backend_->Allocate(device, bytes);
    v1::ClientMessage message;
    v1::RegisterCuda* registration = message.mutable_cuda();
    registration->set_registration_id(77);
    registration->set_device_uuid(backend_->Uuid(device));
    for (int slot = 0; slot < 2; ++slot) {
      registration->add_ready_events(backend_->ExportEvent(absl::StrCat("r", rank, ".ready")));
      registration->add_done_events(backend_->ExportEvent(absl::StrCat("r", rank, ".done")));
    }
    v1::CudaAllocation* allocation = registration->add_allocations();
    allocation->set_allocation_id(1);
    allocation->set_ipc_handle(memory.handle);
    allocation->set_bytes(bytes);
    Push(client, message);
    const auto answer = client.link->NextOf(v1::DaemonMessage::kCudaRegistered);
    EXPECT_TRUE(answer.has_value());
    if (answer.has_value()) {
      EXPECT_EQ(answer->cuda_registered().registration_id(), 77u);
      EXPECT_EQ(answer->cuda_registered().code(), 0) << answer->cuda_registered().message();
    }
    return memory.data;
  }

  // An in-place float32 sum allreduce of `count` elements at the start of
  // allocation 1, in event slot `slot`.
  static v1::TensorRequest DeviceAllreduce(uint64_t request_id, const std::string& name,
                                           int64_t count, uint32_t slot = 0) {
    v1::TensorRequest request = Allreduce(request_id, name);
    request.set_shape(0, count);
    request.set_length(static_cast<uint64_t>(count) * sizeof(float));
    request.set_memory(v1::MEMORY_KIND_CUDA);
    request.mutable_device_input()->set_allocation_id(1);
    request.mutable_device_output()->set_allocation_id(1);
    request.mutable_device_output()->set_bytes(request.length());
    request.set_event_slot(slot);
    request.set_event_sequence(request_id);
    return request;
  }

  // The next record of `client`, which must fail request `request_id`: its
  // code and the text that came with it.
  static std::pair<absl::StatusCode, std::string> NextFailure(TestClient& client,
                                                              uint64_t request_id) {
    const auto completion = client.NextCompletion();
    if (!completion.has_value()) return {absl::StatusCode::kOk, "no record"};
    EXPECT_EQ(completion->record.request_id, request_id);
    return {static_cast<absl::StatusCode>(completion->record.status_code), completion->text};
  }

  gpu::FakeDeviceBackend* backend_ = nullptr;
};

TEST_F(GpuEngineTest, ACudaAllreduceCompletesWithItsResultInTheOutputs) {
  StartWithDevices(2);
  std::vector<TestClient> clients = JoinJob(2);
  std::vector<float*> memory;
  for (int r = 0; r < 2; ++r) {
    memory.push_back(reinterpret_cast<float*>(RegisterCuda(clients[r], r, 64)));
    for (int i = 0; i < 16; ++i) memory[r][i] = static_cast<float>((r + 1) * i);
  }
  for (int r = 0; r < 2; ++r) Send(clients[r], DeviceAllreduce(1, "grad", 16));
  for (int r = 0; r < 2; ++r) {
    const auto record = clients[r].NextRecord();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->status_code, 0);
    EXPECT_EQ(record->flags, shm::kRecordDeviceResult);
    EXPECT_EQ(record->result_bytes, 64u);
    EXPECT_EQ(record->result_dim0, 16);
    for (int i = 0; i < 16; ++i) ASSERT_EQ(memory[r][i], static_cast<float>(3 * i));
  }
  const v1::StatusResponse status = Status();
  EXPECT_EQ(status.totals().collectives(), 1u);
  EXPECT_EQ(status.clients(0).result_bytes_held(), 0u) << "nothing is held in the result segment";
  EXPECT_TRUE(status.gpu().built());
  EXPECT_EQ(status.gpu().open_ipc_mappings(), 2u);
  EXPECT_EQ(status.gpu().batches_in_flight(), 1u) << "until the GPU says it is done";

  // The slot is free once the request completed: the next step reuses it.
  backend_->FinishWork();
  for (int r = 0; r < 2; ++r) Send(clients[r], DeviceAllreduce(2, "grad", 16));
  for (int r = 0; r < 2; ++r) {
    const auto record = clients[r].NextRecord();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->status_code, 0);
    EXPECT_EQ(memory[r][1], 6.0f);
  }
}

// CUDA batches complete through the same path as the others: Prometheus
// counts them as collectivectl status does.
TEST_F(GpuEngineTest, CudaCollectivesReachTheMetricsAsTheStatusCountsThem) {
  StartWithDevices(2);
  std::vector<TestClient> clients = JoinJob(2);
  for (int r = 0; r < 2; ++r) RegisterCuda(clients[r], r, 64);
  for (int r = 0; r < 2; ++r) Send(clients[r], DeviceAllreduce(1, "grad", 16));
  for (int r = 0; r < 2; ++r) {
    const auto record = clients[r].NextRecord();
    ASSERT_TRUE(record.has_value());
    ASSERT_EQ(record->status_code, 0);
  }
  EXPECT_EQ(Status().totals().collectives(), 1u);
  auto promise = std::make_shared<std::promise<v1::MetricsResponse>>();
  auto future = promise->get_future();
  ASSERT_TRUE(engine_->Post(engine::MetricsEvent{
      [promise](const v1::MetricsResponse& metrics) { promise->set_value(metrics); }}));
  ASSERT_EQ(future.wait_for(kTimeout), std::future_status::ready);
  const std::string text = future.get().text();
  EXPECT_THAT(
      text,
      HasSubstr("collectived_collectives_total{collective=\"allreduce\",dtype=\"float32\"} 1"));
  EXPECT_THAT(
      text, HasSubstr("collectived_requests_total{collective=\"allreduce\",dtype=\"float32\"} 2"));
  EXPECT_THAT(text,
              HasSubstr("collectived_bytes_total{collective=\"allreduce\",dtype=\"float32\"} 128"));
}

TEST_F(GpuEngineTest, CpuAndGpuTensorsOfOneNameAreAMismatchEveryRankHears) {
  StartWithDevices(1);
  std::vector<TestClient> clients = JoinJob(2);
  RegisterCuda(clients[0], 0, 64);
  Send(clients[0], DeviceAllreduce(1, "layer1.weight", 4));
  v1::TensorRequest host = DeviceAllreduce(1, "layer1.weight", 4);
  host.clear_memory();
  host.clear_device_input();
  host.clear_device_output();
  Send(clients[1], host);
  for (TestClient& client : clients) {
    const auto [code, text] = NextFailure(client, 1);
    EXPECT_EQ(code, absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(text,
              "Mismatched CPU and GPU tensors for 'layer1.weight': rank 0 sent a GPU tensor, "
              "rank 1 sent a CPU tensor");
  }
}

TEST_F(GpuEngineTest, AlltoallReturnsTheReceivedSplitsThroughTheResultSegment) {
  StartWithDevices(2);
  std::vector<TestClient> clients = JoinJob(2);
  std::vector<int32_t*> memory;
  for (int r = 0; r < 2; ++r) {
    memory.push_back(reinterpret_cast<int32_t*>(RegisterCuda(clients[r], r, 64)));
    for (int i = 0; i < 3; ++i) memory[r][i] = 10 * r + i;
  }
  // Rank 0 sends 1 row to itself and 2 to rank 1; rank 1 sends 2 and 1.
  const std::vector<std::vector<int64_t>> splits = {{1, 2}, {2, 1}};
  for (int r = 0; r < 2; ++r) {
    v1::TensorRequest request = DeviceAllreduce(1, "tokens", 3);
    request.set_collective(v1::COLLECTIVE_ALLTOALL);
    request.clear_op();
    request.set_dtype(v1::DATA_TYPE_INT32);
    request.mutable_device_output()->set_offset(32);
    request.mutable_device_output()->set_bytes(32);
    for (int64_t split : splits[r]) request.add_splits(split);
    Send(clients[r], request);
  }
  const std::vector<std::vector<int32_t>> expected = {{0, 10, 11}, {1, 2, 12}};
  for (int r = 0; r < 2; ++r) {
    const auto record = clients[r].NextRecord();
    ASSERT_TRUE(record.has_value());
    ASSERT_EQ(record->status_code, 0);
    EXPECT_EQ(record->flags, shm::kRecordDeviceResult);
    EXPECT_EQ(record->result_dim0, 3);
    ASSERT_EQ(record->aux_count, 2u);
    const auto* received =
        reinterpret_cast<const int64_t*>(clients[r].results->data() + record->aux_offset);
    EXPECT_EQ(received[0], splits[0][r]);
    EXPECT_EQ(received[1], splits[1][r]);
    EXPECT_EQ(std::vector<int32_t>(memory[r] + 8, memory[r] + 11), expected[r]);
  }
  EXPECT_GT(Status().result_arena_used_bytes(), 0u);
  for (int r = 0; r < 2; ++r) Release(clients[r], 1);
  EXPECT_EQ(Status().result_arena_used_bytes(), 0u) << "released like any result";
}

TEST_F(GpuEngineTest, AnNcclFailureReachesEveryRankAndFailsTheJob) {
  StartWithDevices(2);
  std::vector<TestClient> clients = JoinJob(2);
  for (int r = 0; r < 2; ++r) RegisterCuda(clients[r], r, 64);
  backend_->FailNext("AllReduce", absl::UnavailableError("ncclAllReduce: unhandled system error"));
  for (int r = 0; r < 2; ++r) Send(clients[r], DeviceAllreduce(1, "embedding", 4));
  for (TestClient& client : clients) {
    const auto [code, text] = NextFailure(client, 1);
    EXPECT_NE(code, absl::StatusCode::kOk);
    EXPECT_THAT(
        text, AllOf(HasSubstr("'embedding'"), HasSubstr("ncclAllReduce: unhandled system error")));
    const auto failed = client.link->NextOf(v1::DaemonMessage::kJobFailed);
    ASSERT_TRUE(failed.has_value());
  }
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_FAILED);
}

TEST_F(GpuEngineTest, AGpuThatNeverFinishesFailsTheJobAndAbortsNccl) {
  config_.gpu_timeout_seconds = 0.2;
  config_.heartbeat_interval_ms = 10;
  StartWithDevices(1);
  std::vector<TestClient> clients = JoinJob(2);
  for (int r = 0; r < 2; ++r) RegisterCuda(clients[r], 0, 64);
  for (int r = 0; r < 2; ++r) Send(clients[r], DeviceAllreduce(1, "hung", 4));
  for (TestClient& client : clients) ASSERT_TRUE(client.NextRecord().has_value());
  // The batch never finishes on the (fake) GPU.
  for (TestClient& client : clients) {
    const auto failed = client.link->NextOf(v1::DaemonMessage::kJobFailed);
    ASSERT_TRUE(failed.has_value());
    EXPECT_THAT(
        failed->job_failed().message(),
        AllOf(HasSubstr("'hung' did not finish within 0.2 s"), HasSubstr("gpu_timeout_seconds")));
  }
  EXPECT_EQ(backend_->communicators_aborted(), 1);
}

TEST_F(GpuEngineTest, AClientThatDiesLeavesNoMappingOpen) {
  StartWithDevices(1);
  std::vector<TestClient> clients = JoinJob(2);
  for (int r = 0; r < 2; ++r) RegisterCuda(clients[r], 0, 64);
  for (int r = 0; r < 2; ++r) Send(clients[r], DeviceAllreduce(1, "w", 4));
  for (TestClient& client : clients) ASSERT_TRUE(client.NextRecord().has_value());
  EXPECT_EQ(backend_->opened_mappings(), 2);

  // Rank 1 dies while its batch is still on the GPU.
  ASSERT_TRUE(engine_->Post(engine::SessionClosedEvent{clients[1].link}));
  const auto failed = clients[0].link->NextOf(v1::DaemonMessage::kJobFailed);
  ASSERT_TRUE(failed.has_value());
  EXPECT_THAT(failed->job_failed().message(), HasSubstr("disconnected"));
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(backend_->communicators_aborted(), 1) << "its NCCL kernels must not wait forever";
  EXPECT_EQ(backend_->closed_mappings(), 0) << "the GPU may still use them";

  EXPECT_EQ(Status().gpu().open_ipc_mappings(), 2u);
  backend_->FinishWork();
  ASSERT_TRUE(engine_->Post(engine::SessionClosedEvent{clients[0].link}));
  const v1::StatusResponse status = Status();
  EXPECT_EQ(status.job().state(), v1::JOB_STATE_IDLE);
  EXPECT_EQ(status.gpu().open_ipc_mappings(), 0u);
  EXPECT_EQ(status.gpu().batches_in_flight(), 0u);
  EXPECT_EQ(backend_->closed_mappings(), 2) << "every mapping closed once the GPU was done";
}

// Jobs use the GPU path at once, each on its own lane of streams: a job
// whose GPU work never finishes fails alone, and its abort abandons its own
// streams only; the other job's work goes on.
TEST_F(GpuEngineTest, TwoJobsUseTheGpuAtOnceAndOnesHangFailsItAlone) {
  config_.gpu_timeout_seconds = 0.2;
  config_.heartbeat_interval_ms = 10;
  StartWithDevices(4);
  std::vector<TestClient> a = JoinJob(2, true, {}, "a");  // sequence 1: lane 1
  std::vector<TestClient> b = JoinJob(2, true, {}, "b");  // lane 2
  std::vector<float*> memory_a;
  std::vector<float*> memory_b;
  for (int r = 0; r < 2; ++r) {
    memory_a.push_back(reinterpret_cast<float*>(RegisterCuda(a[r], r, 64)));
    memory_b.push_back(reinterpret_cast<float*>(RegisterCuda(b[r], 2 + r, 64)));
    for (int i = 0; i < 16; ++i) {
      memory_a[r][i] = static_cast<float>(r + 1);
      memory_b[r][i] = static_cast<float>(10 * (r + 1));
    }
  }
  // The same name in both jobs, at once.
  for (int r = 0; r < 2; ++r) {
    Send(a[r], DeviceAllreduce(1, "grad", 16));
    Send(b[r], DeviceAllreduce(1, "grad", 16));
  }
  for (int r = 0; r < 2; ++r) {
    for (TestClient* client : {&a[r], &b[r]}) {
      const auto record = client->NextRecord();
      ASSERT_TRUE(record.has_value());
      ASSERT_EQ(record->status_code, 0);
    }
    EXPECT_EQ(memory_a[r][15], 3.0f);
    EXPECT_EQ(memory_b[r][15], 30.0f);
  }
  EXPECT_EQ(backend_->communicators_created(), 2) << "one communicator per job";
  EXPECT_EQ(Status().gpu().batches_in_flight(), 2u);

  // Job b's batch finishes on the GPU; job a's never does.
  EXPECT_EQ(backend_->FinishWork(uint64_t{2}), 2u) << "one notice per device of job b";
  for (TestClient& client : a) {
    const auto failed = client.link->NextOf(v1::DaemonMessage::kJobFailed);
    ASSERT_TRUE(failed.has_value());
    EXPECT_THAT(failed->job_failed().message(), HasSubstr("'grad' did not finish within 0.2 s"));
  }
  EXPECT_EQ(backend_->communicators_aborted(), 1);
  EXPECT_EQ(backend_->abandoned_lanes(), std::vector<uint64_t>{1}) << "job a's streams only";

  // Job b goes on on the GPU.
  for (int r = 0; r < 2; ++r) Send(b[r], DeviceAllreduce(2, "grad", 16));
  for (int r = 0; r < 2; ++r) {
    const auto record = b[r].NextRecord();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->status_code, 0);
    EXPECT_EQ(memory_b[r][0], 60.0f);
  }
  const v1::StatusResponse status = Status();
  ASSERT_EQ(status.jobs_size(), 2);
  EXPECT_EQ(status.jobs(0).job().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(status.jobs(1).job().state(), v1::JOB_STATE_RUNNING);
}

TEST_F(GpuEngineTest, ARegistrationThatFailsIsAnsweredWithWhy) {
  StartWithDevices(1);
  std::vector<TestClient> clients = JoinJob(1);
  v1::ClientMessage message;
  message.mutable_cuda()->set_registration_id(5);
  message.mutable_cuda()->set_device_uuid("not a uuid");
  Push(clients[0], message);
  const auto answer = clients[0].link->NextOf(v1::DaemonMessage::kCudaRegistered);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->cuda_registered().registration_id(), 5u);
  EXPECT_EQ(answer->cuda_registered().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(answer->cuda_registered().message(), HasSubstr("16 bytes, not 10"));

  Send(clients[0], DeviceAllreduce(1, "x", 4));
  // The request's error carries why the device was not registered.
  EXPECT_THAT(NextFailure(clients[0], 1).second,
              AllOf(HasSubstr("request 1 ('x')"), HasSubstr("CUDA device could not be registered"),
                    HasSubstr("16 bytes, not 10")));
}

TEST_F(GpuEngineTest, ADaemonWithoutCudaRefusesCudaTensorsAndServesTheRest) {
  StartWithDevices(0);
  std::vector<TestClient> clients = JoinJob(1);
  v1::ClientMessage message;
  message.mutable_cuda()->set_registration_id(1);
  Push(clients[0], message);
  const auto answer = clients[0].link->NextOf(v1::DaemonMessage::kCudaRegistered);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->cuda_registered().code(), static_cast<int>(absl::StatusCode::kUnimplemented));

  Send(clients[0], DeviceAllreduce(1, "x", 4));
  EXPECT_THAT(NextFailure(clients[0], 1).second,
              HasSubstr("CUDA tensors need a collectived built with CUDA and NCCL"));

  v1::TensorRequest host = DeviceAllreduce(2, "y", 4);
  host.clear_memory();
  host.clear_device_input();
  host.clear_device_output();
  Send(clients[0], host);
  const auto record = clients[0].NextRecord();
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status_code, 0);
  EXPECT_EQ(record->flags, 0u);
}

}  // namespace
}  // namespace collective::daemon::engine
