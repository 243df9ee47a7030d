// daemon/engine driven directly, with fake Register calls and session links
// (job/session_link.h) and the real shared-memory segments: formation and
// its deadline, registration refusals, attach, submit (through the ring;
// never on the stream) and complete (a failure's text with its record), a
// reused request id, leaving, client death, the attach deadline, cancelled
// registrations and shutdown;
// process sets (static ones, adding and removing them, membership), barrier,
// join, alltoall's received splits, errors that reach every rank, and the
// stall inspector's shutdown limit.
#include "daemon/engine/engine.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/unit/engine/engine_harness.h"

namespace collective::daemon::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class EngineTest : public EngineHarness {
 protected:
  // Float32 sum allreduce of 4 elements at arena offset 0: rank r puts r + 1.
  void Submit(TestClient& client, uint64_t request_id, const std::string& name) {
    auto* input = reinterpret_cast<float*>(client.segment->arena());
    for (int i = 0; i < 4; ++i) {
      input[i] = static_cast<float>(client.call->response().topology().rank() + 1);
    }
    v1::ClientMessage message;
    v1::TensorRequest* request = message.mutable_submit()->add_requests();
    request->set_request_id(request_id);
    request->set_name(name);
    request->set_collective(v1::COLLECTIVE_ALLREDUCE);
    request->set_op(v1::REDUCE_OP_SUM);
    request->set_dtype(v1::DATA_TYPE_FLOAT32);
    request->add_shape(4);
    request->set_length(16);
    Push(client, message);
  }

  // The next record of `client`: request `id`, failed with `code`; its text.
  static std::string NextFailure(TestClient& client, uint64_t id, absl::StatusCode code) {
    const auto completion = client.NextCompletion();
    EXPECT_TRUE(completion.has_value()) << "no record";
    if (!completion.has_value()) return "";
    EXPECT_EQ(completion->record.request_id, id);
    EXPECT_EQ(completion->record.status_code, static_cast<int32_t>(code));
    EXPECT_EQ(completion->record.result_bytes, 0u);
    return completion->text;
  }

  // A control collective (no data).
  static v1::TensorRequest Control(uint64_t request_id, v1::Collective collective,
                                   const std::string& name, int32_t set = 0) {
    v1::TensorRequest request;
    request.set_request_id(request_id);
    request.set_name(name);
    request.set_collective(collective);
    request.set_process_set_id(set);
    return request;
  }

  // The four floats of an allreduce result.
  static std::vector<float> Floats(const TestClient& client, const shm::CompletionRecord& record) {
    std::vector<float> values(record.result_bytes / sizeof(float));
    std::memcpy(values.data(), client.results->data() + record.result_offset, record.result_bytes);
    return values;
  }

  // Process sets in a Status response, as (id, ranks).
  std::vector<std::pair<int32_t, Ranks>> ProcessSets() {
    std::vector<std::pair<int32_t, Ranks>> sets;
    const v1::StatusResponse status = Status();
    for (const v1::ProcessSet& set : status.process_sets()) {
      sets.emplace_back(set.id(), Ranks(set.ranks().begin(), set.ranks().end()));
    }
    return sets;
  }
};

TEST_F(EngineTest, FormsTheJobWhenEveryLocalRankRegistered) {
  Start();
  auto rank1 = Register(1, 2);
  const v1::StatusResponse forming = Status();
  EXPECT_EQ(forming.job().state(), v1::JOB_STATE_FORMING);
  EXPECT_EQ(forming.job().id(), "default");
  EXPECT_THAT(forming.job().missing_local_ranks(), ElementsAre(0));
  EXPECT_EQ(rank1->finishes(), 0) << "Register answers only when the job forms";

  auto rank0 = Register(0, 2);
  for (const auto& call : {rank0, rank1}) {
    const auto status = call->Await();
    ASSERT_TRUE(status.has_value());
    ASSERT_TRUE(status->ok()) << *status;
  }
  const v1::RegisterResponse r0 = rank0->response();
  const v1::RegisterResponse r1 = rank1->response();
  EXPECT_EQ(r0.topology().rank(), 0);
  EXPECT_EQ(r1.topology().rank(), 1);
  EXPECT_EQ(r1.topology().size(), 2);
  EXPECT_EQ(r1.topology().local_size(), 2);
  EXPECT_EQ(r1.topology().cross_size(), 1);
  EXPECT_EQ(r1.busy_threads_on_host(), 3) << "two ranks and the engine wait busily here";
  EXPECT_NE(r0.client_id(), r1.client_id());
  EXPECT_NE(r0.session_token(), r1.session_token());
  EXPECT_EQ(r0.session_token().size(), 16u);
  EXPECT_NE(r0.arena().name(), r1.arena().name());
  EXPECT_EQ(r0.results().name(), r1.results().name());
  EXPECT_EQ(r0.epoch(), kEpoch);
  EXPECT_EQ(r0.limits().max_outstanding_requests(), 8u);
  EXPECT_EQ(r0.limits().max_dims(), 64u);
  EXPECT_EQ(r0.limits().max_name_bytes(), config_.max_name_bytes);
  EXPECT_EQ(r0.limits().fusion_threshold_bytes(), config_.fusion_threshold_bytes);
  EXPECT_EQ(r0.arena().size_bytes(),
            shm::ComputeClientSegmentGeometry(16, shm::kMinTextRingBytes, shm::kMinSubmitRingBytes,
                                              config_.default_arena_bytes)
                .segment_bytes);
  EXPECT_EQ(Segments().size(), 4u)
      << "two client segments, the result segment and the doorbell segment";
  EXPECT_EQ(r0.doorbell().size_bytes(), shm::DoorbellSegment::kSegmentBytes);
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_RUNNING);
}

TEST_F(EngineTest, FormationDeadlineNamesTheMissingRanks) {
  config_.register_timeout_seconds = 0.2;
  Start();
  auto rank1 = Register(1, 3);
  const auto status = rank1->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(status->message(),
            "job 'default' did not form within 0.2 s: local ranks 0, 2 of 3 never registered");
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_IDLE);
  EXPECT_TRUE(Segments().empty()) << "the abandoned client's segment is removed";
}

TEST_F(EngineTest, RefusesConflictingRegistrations) {
  Start();
  auto first = Register(0, 2);
  ASSERT_EQ(Status().job().state(), v1::JOB_STATE_FORMING);

  auto same_rank = Register(0, 2);
  auto status = same_rank->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(status->message(), absl::StrCat("local rank 0 of job 'default' is already registered "
                                            "by pid ",
                                            ::getpid()));

  auto other_size = Register(1, 3);
  status = other_size->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status->message(),
            absl::StrCat("local_size mismatch for job 'default': local rank 0 (pid ", ::getpid(),
                         ") registered with local_size 2, this client says 3"));

  // Another job forms beside it, in a run of its own.
  auto other_job = Register(1, 2, "other");
  const v1::StatusResponse both = Status();
  ASSERT_EQ(both.jobs_size(), 2);
  EXPECT_EQ(both.jobs(0).job().id(), "default");
  EXPECT_EQ(both.jobs(1).job().id(), "other");
  EXPECT_EQ(both.jobs(1).job().state(), v1::JOB_STATE_FORMING);
  EXPECT_EQ(other_job->finishes(), 0) << "it waits for its own rank 0";

  EXPECT_EQ(first->finishes(), 0) << "the refusals did not disturb the forming job";
  auto second = Register(1, 2);
  ASSERT_TRUE(first->Await().has_value());
  ASSERT_TRUE(second->Await().has_value());
  EXPECT_TRUE(second->Await()->ok());

  auto late = Register(1, 2);
  status = late->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(status->message()), HasSubstr("is already running with all 2"));
}

TEST_F(EngineTest, AttachNeedsTheRightTokenAndHappensOnce) {
  Start();
  std::vector<TestClient> clients = JoinJob(1, /*attach=*/false);
  ASSERT_EQ(clients.size(), 1u);
  TestClient& client = clients[0];
  auto intruder = std::make_shared<FakeSessionLink>();
  v1::ClientMessage attach;
  attach.mutable_attach()->set_client_id(client.call->response().client_id());
  attach.mutable_attach()->set_session_token("wrong");
  Post(intruder, attach);
  auto closed = intruder->AwaitClosed();
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->code(), absl::StatusCode::kPermissionDenied);

  ASSERT_NO_FATAL_FAILURE(Attach(client));
  auto again = std::make_shared<FakeSessionLink>();
  attach.mutable_attach()->set_session_token(client.call->response().session_token());
  Post(again, attach);
  closed = again->AwaitClosed();
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->code(), absl::StatusCode::kAlreadyExists);

  auto stranger = std::make_shared<FakeSessionLink>();
  v1::ClientMessage submit;
  submit.mutable_submit();
  Post(stranger, submit);
  closed = stranger->AwaitClosed();
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Status().clients(0).attached());
}

TEST_F(EngineTest, SubmitReducesThroughTheSegmentsAndReleasesResults) {
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  Submit(clients[0], 11, "w");
  EXPECT_EQ(Status().pending(0).name(), "w");
  Submit(clients[1], 11, "w");
  for (TestClient& client : clients) {
    const auto record = client.NextRecord();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->request_id, 11u);
    EXPECT_EQ(record->status_code, 0);
    EXPECT_EQ(record->result_bytes, 16u);
    EXPECT_EQ(record->result_dim0, 4);
    float result[4];
    std::memcpy(result, client.results->data() + record->result_offset, sizeof(result));
    EXPECT_THAT(result, ElementsAre(3.0f, 3.0f, 3.0f, 3.0f));
  }
  v1::StatusResponse status = Status();
  EXPECT_EQ(status.totals().collectives(), 1u);
  EXPECT_GT(status.result_arena_used_bytes(), 0u);
  EXPECT_EQ(status.clients(0).result_bytes_held(), 16u);

  // The block returns to the free space once both readers released it.
  for (TestClient& client : clients) Release(client, 11);
  status = Status();
  EXPECT_EQ(status.result_arena_used_bytes(), 0u);
  EXPECT_EQ(status.clients(1).result_bytes_held(), 0u);
}

TEST_F(EngineTest, AClientThatDiesFailsTheJobForTheOthers) {
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  Submit(clients[1], 5, "waiting");
  ASSERT_TRUE(engine_->Post(engine::SessionClosedEvent{clients[0].link}));

  const std::string why = absl::StrCat("rank 0 (pid ", ::getpid(),
                                       ") disconnected from collectived without leaving job "
                                       "'default' (it died or closed its session); the job "
                                       "cannot continue");
  EXPECT_EQ(NextFailure(clients[1], 5, absl::StatusCode::kAborted), why);
  const auto job_failed = clients[1].link->NextOf(v1::DaemonMessage::kJobFailed);
  ASSERT_TRUE(job_failed.has_value());
  EXPECT_EQ(job_failed->job_failed().message(), why);
  const auto closed = clients[0].link->AwaitClosed();
  ASSERT_TRUE(closed.has_value());
  EXPECT_TRUE(closed->ok());

  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_FAILED);
  // Later submissions fail with the same reason.
  Submit(clients[1], 6, "later");
  EXPECT_EQ(NextFailure(clients[1], 6, absl::StatusCode::kAborted), why);

  // When the last client goes, the job is torn down and its segments go.
  ASSERT_TRUE(engine_->Post(engine::SessionClosedEvent{clients[1].link}));
  ASSERT_TRUE(clients[1].link->AwaitClosed().has_value());
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_IDLE);
  EXPECT_TRUE(Segments().empty());
  // And the next job forms.
  EXPECT_EQ(JoinJob(1).size(), 1u);
}

// Two jobs on one engine: each its own run, segments, results and totals;
// one's failure reaches its own ranks only.
TEST_F(EngineTest, TwoJobsRunAtOnceAndOnesFailureLeavesTheOtherAlone) {
  Start();
  std::vector<TestClient> a = JoinJob(2, true, {}, "a");
  std::vector<TestClient> b = JoinJob(3, true, {}, "b");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_NE(a[0].call->response().results().name(), b[0].call->response().results().name());
  EXPECT_NE(a[0].call->response().doorbell().name(), b[0].call->response().doorbell().name());
  auto expect_sums = [this](std::vector<TestClient>& clients, uint64_t id, const std::string& name,
                            float sum) {
    for (TestClient& client : clients) Submit(client, id, name);
    for (TestClient& client : clients) {
      const auto record = client.NextRecord();
      ASSERT_TRUE(record.has_value());
      ASSERT_EQ(record->status_code, 0);
      float result[4];
      std::memcpy(result, client.results->data() + record->result_offset, sizeof(result));
      EXPECT_THAT(result, ElementsAre(sum, sum, sum, sum)) << name;
      Release(client, id);
    }
  };
  // The same tensor name in both jobs: names are per job.
  expect_sums(a, 1, "w", 3.0f);
  expect_sums(b, 1, "w", 6.0f);
  v1::StatusResponse status = Status();
  ASSERT_EQ(status.jobs_size(), 2);
  EXPECT_EQ(status.jobs(0).job().id(), "a");
  EXPECT_EQ(status.jobs(1).job().id(), "b");
  EXPECT_EQ(status.jobs(0).clients_size(), 2);
  EXPECT_EQ(status.jobs(1).clients_size(), 3);
  EXPECT_EQ(status.jobs(0).totals().collectives(), 1u);
  EXPECT_EQ(status.jobs(1).totals().collectives(), 1u);
  EXPECT_EQ(status.totals().collectives(), 2u);

  // A rank of 'a' dies while 'b' has work pending: 'a' fails, 'b' goes on.
  Submit(b[0], 2, "pending");
  ASSERT_TRUE(engine_->Post(engine::SessionClosedEvent{a[0].link}));
  const auto job_failed = a[1].link->NextOf(v1::DaemonMessage::kJobFailed);
  ASSERT_TRUE(job_failed.has_value());
  EXPECT_THAT(job_failed->job_failed().message(), HasSubstr("job 'a'"));
  for (size_t rank = 1; rank < b.size(); ++rank) Submit(b[rank], 2, "pending");
  for (TestClient& client : b) {
    const auto record = client.NextRecord();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->status_code, 0) << "job 'b' heard of job 'a''s failure";
    Release(client, 2);
  }
  expect_sums(b, 3, "after", 6.0f);
  status = Status();
  ASSERT_EQ(status.jobs_size(), 2);
  EXPECT_EQ(status.jobs(0).job().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(status.jobs(1).job().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(status.jobs(1).job().failure(), "");

  // 'a' goes when its last rank does; 'b' is all that is left.
  ASSERT_TRUE(engine_->Post(engine::SessionClosedEvent{a[1].link}));
  ASSERT_TRUE(a[1].link->AwaitClosed().has_value());
  status = Status();
  ASSERT_EQ(status.jobs_size(), 1);
  EXPECT_EQ(status.job().id(), "b");
}

// The daemon's limit of jobs: the next job is refused at registration,
// naming the jobs it serves.
TEST_F(EngineTest, AJobPastMaxJobsIsRefusedNamingTheJobsServed) {
  config_.max_jobs = 1;
  Start();
  auto first = Register(0, 2, "a");
  auto refused = Register(0, 1, "b");
  const auto status = refused->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status->message(),
            absl::StrCat("collectived serves 1 jobs, its limit (max_jobs): job 'a' (uid ",
                         ::geteuid(), "); job 'b' can register when one of them has ended"));
  EXPECT_EQ(first->finishes(), 0);
}

// The daemon-wide memory budget: a job that does not fit is refused at
// registration with what each job holds, not left to hang.
TEST_F(EngineTest, AJobPastTheMemoryBudgetIsRefusedNamingWhatIsInUse) {
  config_.result_arena_bytes = 1 << 20;
  config_.default_arena_bytes = 1 << 20;
  config_.memory_budget_bytes = 3 << 20;
  Start();
  auto first = Register(0, 2, "a");  // 1 MiB arena + 1 MiB result segment
  auto refused = Register(0, 1, "b");
  const auto status = refused->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status->message(),
            absl::StrCat("collectived's shared-memory budget (memory_budget_bytes) is 3145728 "
                         "bytes and 2097152 are in use (job 'a' (uid ",
                         ::geteuid(),
                         ") holds 2097152 bytes): job 'b' asks for 2097152 more (an arena of "
                         "1048576 bytes and its result segment of 1048576 bytes)"));
  // Another rank of 'a' still fits (1 MiB more).
  auto second = Register(1, 2, "a");
  ASSERT_TRUE(second->Await().has_value());
  EXPECT_TRUE(second->Await()->ok());
}

TEST_F(EngineTest, LeavingEndsTheJobForTheOthers) {
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  Submit(clients[1], 5, "waiting");
  v1::ClientMessage leave;
  leave.mutable_leave();
  Post(clients[0].link, leave);
  EXPECT_EQ(NextFailure(clients[1], 5, absl::StatusCode::kFailedPrecondition),
            absl::StrCat("rank 0 (pid ", ::getpid(),
                         ") has left job 'default' (it shut down); no collective of this job can "
                         "complete any more"));
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_ENDING);
  for (TestClient& client : clients) {
    ASSERT_TRUE(engine_->Post(engine::SessionClosedEvent{client.link}));
    ASSERT_TRUE(client.link->AwaitClosed().has_value());
  }
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_IDLE);
}

TEST_F(EngineTest, AClientThatNeverAttachesFailsTheJobAtTheDeadline) {
  config_.register_timeout_seconds = 0.3;
  Start();
  std::vector<TestClient> clients = JoinJob(2, /*attach=*/false);
  ASSERT_EQ(clients.size(), 2u);
  ASSERT_NO_FATAL_FAILURE(Attach(clients[0]));
  const auto job_failed = clients[0].link->NextOf(v1::DaemonMessage::kJobFailed);
  ASSERT_TRUE(job_failed.has_value());
  EXPECT_EQ(job_failed->job_failed().code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(job_failed->job_failed().message(),
            absl::StrCat("rank 1 (pid ", ::getpid(),
                         ") registered with job 'default' but did not open its session within "
                         "0.3 s; the job cannot continue"));
}

TEST_F(EngineTest, AClientThatDiesBeforeAttachingFailsTheJobAtOnce) {
  // The deadline is an hour away: only the death can fail the job in time.
  config_.register_timeout_seconds = 3600;
  Start();
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  TestClient alive;
  alive.call = Register(0, 2);
  const auto gone = Register(1, 2, "", {}, dead);
  for (FakeRegisterCall* call : {alive.call.get(), gone.get()}) {
    const auto registered = call->Await();
    ASSERT_TRUE(registered.has_value() && registered->ok());
  }
  // The living rank opens its session, and hears why the job failed,
  // whether that happened before or after it attached.
  alive.link = std::make_shared<FakeSessionLink>();
  v1::ClientMessage attach;
  attach.mutable_attach()->set_client_id(alive.call->response().client_id());
  attach.mutable_attach()->set_session_token(alive.call->response().session_token());
  Post(alive.link, attach);
  const auto job_failed = alive.link->NextOf(v1::DaemonMessage::kJobFailed);
  ASSERT_TRUE(job_failed.has_value());
  EXPECT_EQ(job_failed->job_failed().code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(job_failed->job_failed().message(),
            absl::StrCat("rank 1 (pid ", dead,
                         ") registered with job 'default' but exited before opening its "
                         "session; the job cannot continue"));
}

TEST_F(EngineTest, CancelledRegistrationLeavesTheJobForming) {
  Start();
  auto rank0 = Register(0, 2);
  ASSERT_EQ(Status().job().state(), v1::JOB_STATE_FORMING);
  ASSERT_TRUE(engine_->Post(engine::RegisterCancelledEvent{rank0->id()}));
  const auto status = rank0->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_IDLE) << "no rank left: no job";
  EXPECT_TRUE(Segments().empty());
  EXPECT_EQ(JoinJob(2).size(), 2u);
}

TEST_F(EngineTest, ShutdownFailsPendingWorkAndEndsEverySession) {
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  Submit(clients[0], 9, "pending");
  engine_->Shutdown("test is over");
  EXPECT_EQ(NextFailure(clients[0], 9, absl::StatusCode::kUnavailable),
            "collectived is shutting down (test is over)");
  for (TestClient& client : clients) {
    const auto closed = client.link->AwaitClosed();
    ASSERT_TRUE(closed.has_value());
    EXPECT_EQ(closed->code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_TRUE(Segments().empty());
  EXPECT_FALSE(engine_->Post(engine::HealthEvent{[](const v1::HealthResponse&) {}}))
      << "a stopped engine refuses events";
  // What the service answers a client that comes now: the same reason.
  EXPECT_EQ(engine_->Refusal(),
            absl::UnavailableError("collectived is shutting down (test is over)"));
}

// --- Process sets and the other collectives -----------------------------------------

using ::testing::Pair;

TEST_F(EngineTest, StaticProcessSetsAreCreatedWhenTheJobForms) {
  Start();
  std::vector<TestClient> clients = JoinJob(3, /*attach=*/true, {{2, 0}});
  ASSERT_EQ(clients.size(), 3u);
  for (const TestClient& client : clients) {
    const v1::RegisterResponse response = client.call->response();
    ASSERT_EQ(response.process_sets_size(), 1);
    EXPECT_EQ(response.process_sets(0).id(), 1);
    EXPECT_THAT(response.process_sets(0).ranks(), ElementsAre(0, 2));
  }
  EXPECT_THAT(ProcessSets(), ElementsAre(Pair(0, Ranks{0, 1, 2}), Pair(1, Ranks{0, 2})));

  // Set 1 reduces the inputs of ranks 0 and 2 (1 and 3) only.
  Submit(clients[0], 1, "w");  // fills the arena
  Submit(clients[2], 1, "x");
  Send(clients[0], Allreduce(2, "w", 1));
  Send(clients[2], Allreduce(2, "w", 1));
  for (size_t rank : {0, 2}) {
    std::optional<shm::CompletionRecord> record;
    do {
      record = clients[rank].NextRecord();
      ASSERT_TRUE(record.has_value());
    } while (record->request_id != 2);
    EXPECT_EQ(record->status_code, 0);
    EXPECT_THAT(Floats(clients[rank], *record), ElementsAre(4, 4, 4, 4)) << rank;
  }
}

TEST_F(EngineTest, OnlyMembersSubmitToAProcessSet) {
  Start();
  std::vector<TestClient> clients = JoinJob(3, /*attach=*/true, {{0, 2}});
  ASSERT_EQ(clients.size(), 3u);
  Send(clients[1], Allreduce(7, "w", 1));
  EXPECT_EQ(NextFailure(clients[1], 7, absl::StatusCode::kInvalidArgument),
            "request 7 ('w'): rank 1 is not a member of process set 1 [0, 2]");
  Send(clients[1], Allreduce(8, "w", 5));
  EXPECT_EQ(NextFailure(clients[1], 8, absl::StatusCode::kInvalidArgument),
            "request 8 ('w'): process set 5 does not exist");
  EXPECT_EQ(Status().clients(1).outstanding_requests(), 0u);
}

TEST_F(EngineTest, StaticProcessSetsMustAgree) {
  Start();
  auto rank0 = Register(0, 3, "", {{1, 0}});
  auto none = Register(1, 3);
  auto status = none->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status->message(),
            "static process sets mismatch for job 'default': local rank 0 asked for [0, 1], this "
            "client asks for none");
  auto other = Register(1, 3, "", {{0}});
  status = other->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->message(),
            "static process sets mismatch for job 'default': local rank 0 asked for [0, 1], this "
            "client asks for [0]");
  EXPECT_EQ(rank0->finishes(), 0) << "the refusals did not disturb the forming job";
  // The order of the ranks does not matter.
  auto rank1 = Register(1, 3, "", {{0, 1}});
  auto rank2 = Register(2, 3, "", {{1, 0}});
  for (const auto& call : {rank0, rank1, rank2}) {
    const auto formed = call->Await();
    ASSERT_TRUE(formed.has_value());
    EXPECT_TRUE(formed->ok()) << *formed;
  }
  EXPECT_THAT(ProcessSets(), ElementsAre(Pair(0, Ranks{0, 1, 2}), Pair(1, Ranks{0, 1})));
}

TEST_F(EngineTest, AnImpossibleStaticProcessSetAbortsFormation) {
  Start();
  auto rank0 = Register(0, 2, "", {{0, 5}});
  auto rank1 = Register(1, 2, "", {{0, 5}});
  for (const auto& call : {rank0, rank1}) {
    const auto status = call->Await();
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(status->code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status->message(),
              "static process set [0, 5]: rank 5 of process set [0, 5] is not a rank of the job "
              "(0 to 1)");
  }
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_IDLE);
  EXPECT_TRUE(Segments().empty());
  EXPECT_EQ(JoinJob(2).size(), 2u) << "the next job forms";
}

TEST_F(EngineTest, ProcessSetsAreAddedAndRemovedByEveryRank) {
  Start();
  std::vector<TestClient> clients = JoinJob(3);
  ASSERT_EQ(clients.size(), 3u);
  for (TestClient& client : clients) {
    v1::TensorRequest add = Control(1, v1::COLLECTIVE_ADD_PROCESS_SET, "add");
    add.add_process_set_ranks(2);
    add.add_process_set_ranks(1);
    Send(client, add);
  }
  for (TestClient& client : clients) {
    const auto record = client.NextRecord();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->request_id, 1u);
    EXPECT_EQ(record->status_code, 0);
    EXPECT_EQ(record->result_dim0, 1) << "the new set's id";
  }
  EXPECT_THAT(ProcessSets(), ElementsAre(Pair(0, Ranks{0, 1, 2}), Pair(1, Ranks{1, 2})));

  // Rank 1 waits in the set when it is removed: its request is cancelled.
  Send(clients[1], Allreduce(2, "w", 1));
  for (TestClient& client : clients) {
    v1::TensorRequest remove = Control(3, v1::COLLECTIVE_REMOVE_PROCESS_SET, "remove");
    remove.set_target_process_set_id(1);
    Send(client, remove);
  }
  EXPECT_EQ(NextFailure(clients[1], 2, absl::StatusCode::kCancelled), "process set 1 was removed");
  for (TestClient& client : clients) {
    std::optional<shm::CompletionRecord> record;
    do {
      record = client.NextRecord();
      ASSERT_TRUE(record.has_value());
    } while (record->request_id != 3);
    EXPECT_EQ(record->status_code, 0);
    EXPECT_EQ(record->result_dim0, 1);
  }
  EXPECT_THAT(ProcessSets(), ElementsAre(Pair(0, Ranks{0, 1, 2})));
  EXPECT_EQ(Status().clients(1).outstanding_requests(), 0u);
}

TEST_F(EngineTest, AFailedProcessSetChangeReachesEveryRank) {
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  for (TestClient& client : clients) {
    v1::TensorRequest add = Control(1, v1::COLLECTIVE_ADD_PROCESS_SET, "add");
    add.add_process_set_ranks(1);
    add.add_process_set_ranks(0);
    Send(client, add);
  }
  for (TestClient& client : clients) {
    EXPECT_EQ(NextFailure(client, 1, absl::StatusCode::kAlreadyExists),
              "process set [0, 1] is the global process set (id 0), which always exists");
  }
  for (TestClient& client : clients) {
    v1::TensorRequest remove = Control(2, v1::COLLECTIVE_REMOVE_PROCESS_SET, "remove");
    remove.set_target_process_set_id(4);
    Send(client, remove);
  }
  for (TestClient& client : clients) {
    EXPECT_EQ(NextFailure(client, 2, absl::StatusCode::kInvalidArgument),
              "process set 4 does not exist");
  }
}

TEST_F(EngineTest, BarrierCompletesWhenEveryRankArrived) {
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  Send(clients[1], Control(4, v1::COLLECTIVE_BARRIER, "__barrier"));
  EXPECT_EQ(Status().pending(0).name(), "__barrier");
  Send(clients[0], Control(4, v1::COLLECTIVE_BARRIER, "__barrier"));
  for (TestClient& client : clients) {
    const auto record = client.NextRecord();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->request_id, 4u);
    EXPECT_EQ(record->status_code, 0);
    EXPECT_EQ(record->result_bytes, 0u);
  }
}

TEST_F(EngineTest, JoinedRanksContributeZerosUntilEveryRankJoined) {
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  Send(clients[0], Control(1, v1::COLLECTIVE_JOIN, "__join"));
  EXPECT_THAT(Status().joined_ranks(), ElementsAre(0));
  // Rank 1 runs alone: rank 0 contributes zeros.
  Submit(clients[1], 2, "w");
  const auto reduced = clients[1].NextRecord();
  ASSERT_TRUE(reduced.has_value());
  EXPECT_EQ(reduced->request_id, 2u);
  EXPECT_EQ(reduced->status_code, 0);
  EXPECT_THAT(Floats(clients[1], *reduced), ElementsAre(2, 2, 2, 2));
  // Only allreduce carries on.
  Send(clients[1], Control(3, v1::COLLECTIVE_BARRIER, "__barrier"));
  EXPECT_THAT(NextFailure(clients[1], 3, absl::StatusCode::kFailedPrecondition),
              HasSubstr("after a join only allreduce"));

  Send(clients[1], Control(4, v1::COLLECTIVE_JOIN, "__join"));
  const auto first = clients[0].NextRecord();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->request_id, 1u);
  EXPECT_EQ(first->status_code, 0);
  EXPECT_EQ(first->result_dim0, 1) << "the last rank to join";
  const auto last = clients[1].NextRecord();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->request_id, 4u);
  EXPECT_EQ(last->result_dim0, 1);
  EXPECT_TRUE(Status().joined_ranks().empty()) << "the join is over";

  // Both ranks reduce together again.
  Submit(clients[0], 5, "w");
  Submit(clients[1], 5, "w");
  for (TestClient& client : clients) {
    const auto record = client.NextRecord();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->request_id, 5u);
    EXPECT_THAT(Floats(client, *record), ElementsAre(3, 3, 3, 3));
  }
}

TEST_F(EngineTest, AlltoallRecordsPointAtTheReceivedSplits) {
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  // Rank 0 sends its 3 int32 rows as [1, 2]; rank 1 its 2 rows as [2, 0].
  const std::vector<std::vector<int64_t>> splits = {{1, 2}, {2, 0}};
  for (int32_t rank = 0; rank < 2; ++rank) {
    const int64_t rows = splits[rank][0] + splits[rank][1];
    auto* input = reinterpret_cast<int32_t*>(clients[rank].segment->arena() + 128);
    for (int64_t k = 0; k < rows; ++k) input[k] = 10 * rank + static_cast<int32_t>(k);
    v1::TensorRequest request;
    request.set_request_id(9);
    request.set_name("a2a");
    request.set_collective(v1::COLLECTIVE_ALLTOALL);
    request.set_dtype(v1::DATA_TYPE_INT32);
    request.add_shape(rows);
    request.set_offset(128);
    request.set_length(static_cast<uint64_t>(rows) * 4);
    for (int64_t split : splits[rank]) request.add_splits(split);
    Send(clients[rank], request);
  }
  const std::vector<std::vector<int32_t>> expected = {{0, 10, 11}, {1, 2}};
  const std::vector<std::vector<int64_t>> received = {{1, 2}, {2, 0}};
  for (int32_t rank = 0; rank < 2; ++rank) {
    const auto record = clients[rank].NextRecord();
    ASSERT_TRUE(record.has_value());
    ASSERT_EQ(record->status_code, 0);
    EXPECT_EQ(record->result_dim0, static_cast<int64_t>(expected[rank].size()));
    EXPECT_EQ(record->result_offset % shm::kDataAlignment, 0u);
    std::vector<int32_t> values(record->result_bytes / 4);
    std::memcpy(values.data(), clients[rank].results->data() + record->result_offset,
                record->result_bytes);
    EXPECT_EQ(values, expected[rank]) << rank;
    ASSERT_EQ(record->aux_count, 2u);
    EXPECT_EQ(record->aux_offset % shm::kDataAlignment, 0u);
    std::vector<int64_t> splits_received(2);
    std::memcpy(splits_received.data(), clients[rank].results->data() + record->aux_offset, 16);
    EXPECT_EQ(splits_received, received[rank]) << rank;
  }
}

TEST_F(EngineTest, AnOpErrorReachesEveryRank) {
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  for (TestClient& client : clients) {
    v1::TensorRequest request = Allreduce(3, "b");
    request.set_collective(v1::COLLECTIVE_BROADCAST);
    request.set_root_rank(2);
    Send(client, request);
  }
  for (TestClient& client : clients) {
    EXPECT_EQ(NextFailure(client, 3, absl::StatusCode::kInvalidArgument),
              "broadcast of 'b': root rank 2 is not a rank of process set 0 (size 2)");
  }
  // A mismatch, likewise.
  Send(clients[0], Allreduce(4, "m"));
  v1::TensorRequest other = Allreduce(4, "m");
  other.set_op(v1::REDUCE_OP_MAX);
  Send(clients[1], other);
  for (TestClient& client : clients) {
    EXPECT_EQ(NextFailure(client, 4, absl::StatusCode::kFailedPrecondition),
              "Mismatched reduce ops for 'm': rank 0 sent sum, rank 1 sent max");
  }
}

TEST_F(EngineTest, StalledTensorsFailAfterTheShutdownLimit) {
  config_.stall_check_seconds = 0.05;
  config_.stall_shutdown_seconds = 0.1;
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  Submit(clients[0], 6, "w");
  const std::string failed = NextFailure(clients[0], 6, absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(failed, StartsWith("tensor 'w' of process set 0 waited "));
  EXPECT_THAT(failed,
              HasSubstr(" s for ranks [1] to submit it and was failed (stall_shutdown_seconds is "
                        "0.1)"));
  EXPECT_TRUE(Status().pending().empty());
  // The name is free again, and the job carries on.
  Submit(clients[0], 7, "w");
  Submit(clients[1], 7, "w");
  const auto record = clients[1].NextRecord();
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->request_id, 7u);
  EXPECT_EQ(record->status_code, 0);
}

// A group runs all together or not at all: when the stall limit fails one of
// its tensors, the members that were ready and waited for it cannot run
// either, and must not be left outstanding forever (they are in no pending
// table, so nothing would ever report or fail them).
TEST_F(EngineTest, AStalledGroupMemberFailsTheWholeGroup) {
  config_.stall_check_seconds = 0.05;
  config_.stall_shutdown_seconds = 0.1;
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  const auto grouped = [](uint64_t request_id, const std::string& name) {
    v1::TensorRequest request = Allreduce(request_id, name);
    request.set_group_id(1);
    request.set_group_size(2);
    return request;
  };
  // Both ranks submit g.a; only rank 0 submits g.b.
  Send(clients[0], grouped(1, "g.a"));
  Send(clients[0], grouped(2, "g.b"));
  Send(clients[1], grouped(1, "g.a"));
  const auto failed = clients[0].NextCompletion();
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->record.status_code, static_cast<int32_t>(absl::StatusCode::kDeadlineExceeded));
  // Status is answered after whatever the stall check did in the same pass.
  const v1::StatusResponse status = Status();
  EXPECT_EQ(status.clients(0).outstanding_requests(), 0u)
      << "g.a still waits for g.b, which was failed";
  EXPECT_EQ(status.clients(1).outstanding_requests(), 0u)
      << "g.a still waits for g.b, which was failed";
}

// --- One path in, one path out ------------------------------------------------

TEST_F(EngineTest, ASubmissionOnTheStreamIsRefusedAndEndsTheJob) {
  v1::ClientMessage message;
  *message.mutable_submit()->add_requests() = Allreduce(1, "w");
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  Submit(clients[1], 5, "waiting");
  Post(clients[0].link, message);
  const auto closed = clients[0].link->AwaitClosed();
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->code(), absl::StatusCode::kInvalidArgument);
  const std::string why = absl::StrCat(
      "rank 0 (pid ", ::getpid(),
      ") sent submissions, releases or CUDA registrations on its session stream; they go "
      "through the submission ring in the client's shared-memory segment, and the stream "
      "carries only attach and leave; the job cannot continue");
  EXPECT_EQ(closed->message(), why);
  EXPECT_EQ(NextFailure(clients[1], 5, absl::StatusCode::kInvalidArgument), why);
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_FAILED);
  EXPECT_TRUE(clients[0].ring->Empty()) << "the stream's request was not run";
}

TEST_F(EngineTest, AReusedRequestIdIsRefusedByARecordThatSaysSo) {
  Start();
  std::vector<TestClient> clients = JoinJob(2);
  ASSERT_EQ(clients.size(), 2u);
  Submit(clients[0], 7, "first");
  Send(clients[0], Allreduce(7, "second"));
  const auto refusal = clients[0].NextCompletion();
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->record.request_id, 7u);
  EXPECT_EQ(refusal->record.flags, shm::kRecordRefusedDuplicateId);
  EXPECT_EQ(refusal->record.status_code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(refusal->text,
            "request id 7 is already in use by a request in flight or a result not yet released");
  // The first request 7 is untouched.
  Submit(clients[1], 7, "first");
  for (TestClient& client : clients) {
    const auto record = client.NextRecord();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->request_id, 7u);
    EXPECT_EQ(record->flags, 0u);
    EXPECT_EQ(record->status_code, 0);
    EXPECT_THAT(Floats(client, *record), ElementsAre(3, 3, 3, 3));
  }
}

}  // namespace
}  // namespace collective::daemon::engine
