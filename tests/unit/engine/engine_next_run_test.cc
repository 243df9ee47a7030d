// daemon/engine driven directly (tests/unit/engine/engine_harness.h): registrations
// that arrive while the daemon's job has ended but not every rank has left
// it — a rank that shut down and initialised again before the others left,
// as Horovod's suite (shutdown and init after every test) and elastic
// training do. They wait for the ended job to go and then form the next
// one; they fail at their deadline, naming who has not left, if it never
// goes; a cancelled one is forgotten; shutdown answers them.
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/unit/engine/engine_harness.h"

namespace collective::daemon::engine {
namespace {

using ::testing::ElementsAre;

class EngineNextRunTest : public EngineHarness {
 protected:
  // The client says goodbye (as Client::Close does) and its session ends.
  void LeaveAndGo(TestClient& client) {
    v1::ClientMessage leave;
    leave.mutable_leave();
    Post(client.link, leave);
    Go(client);
  }
  // Its session ends (with or without a goodbye before).
  void Go(TestClient& client) {
    ASSERT_TRUE(engine_->Post(SessionClosedEvent{client.link}));
    ASSERT_TRUE(client.link->AwaitClosed().has_value());
  }
  // Starts the engine and a job of 2 whose rank 0 then shut down: the job
  // ends, and rank 1 is still in it.
  void StartEndedJob() {
    Start();
    first_ = JoinJob(2);
    ASSERT_EQ(first_.size(), 2u);
    ASSERT_NO_FATAL_FAILURE(LeaveAndGo(first_[0]));
    ASSERT_EQ(Status().job().state(), v1::JOB_STATE_ENDING);
  }

  std::vector<TestClient> first_;
};

TEST_F(EngineNextRunTest, ARankThatRegistersAgainBeforeTheOthersLeftJoinsTheNextRun) {
  ASSERT_NO_FATAL_FAILURE(StartEndedJob());

  auto rank0 = Register(0, 2);
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_ENDING) << "rank 1 is still in the first run";
  EXPECT_EQ(rank0->finishes(), 0) << "the registration waits instead of being refused";

  ASSERT_NO_FATAL_FAILURE(LeaveAndGo(first_[1]));
  const v1::StatusResponse forming = Status();
  EXPECT_EQ(forming.job().state(), v1::JOB_STATE_FORMING);
  EXPECT_EQ(forming.job().id(), "default");
  EXPECT_THAT(forming.job().missing_local_ranks(), ElementsAre(1));

  auto rank1 = Register(1, 2);
  for (const auto& call : {rank0, rank1}) {
    const auto status = call->Await();
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(status->ok()) << *status;
  }
  EXPECT_EQ(rank0->response().topology().rank(), 0);
  EXPECT_EQ(rank1->response().topology().rank(), 1);
  const v1::StatusResponse running = Status();
  EXPECT_EQ(running.job().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(running.totals().jobs(), 2u);
}

TEST_F(EngineNextRunTest, AnotherJobWaitsForAFailedJobToGo) {
  Start();
  first_ = JoinJob(2);
  ASSERT_EQ(first_.size(), 2u);
  ASSERT_NO_FATAL_FAILURE(Go(first_[0]));  // died: the job failed
  ASSERT_EQ(Status().job().state(), v1::JOB_STATE_FAILED);

  auto other = Register(0, 1, "other");
  EXPECT_EQ(Status().job().id(), "default");
  ASSERT_NO_FATAL_FAILURE(LeaveAndGo(first_[1]));
  const auto status = other->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->ok()) << *status;
  const v1::StatusResponse running = Status();
  EXPECT_EQ(running.job().id(), "other");
  EXPECT_EQ(running.job().state(), v1::JOB_STATE_RUNNING);
}

TEST_F(EngineNextRunTest, AWaitingRegistrationFailsAtItsDeadlineNamingWhoHasNotLeft) {
  config_.register_timeout_seconds = 1;
  ASSERT_NO_FATAL_FAILURE(StartEndedJob());

  auto again = Register(0, 2);
  const auto status = again->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(std::string(status->message()),
            absl::StrCat("job 'default' did not form within 1 s: its previous run has ended, "
                         "but rank 1 (pid ",
                         ::getpid(), ") has not left it (each rank must shut down first)"));
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_ENDING) << "the ended run is left alone";

  ASSERT_NO_FATAL_FAILURE(LeaveAndGo(first_[1]));
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_IDLE) << "nothing waits to form";
  EXPECT_EQ(again->finishes(), 1);
}

TEST_F(EngineNextRunTest, ACancelledWaitingRegistrationIsForgotten) {
  ASSERT_NO_FATAL_FAILURE(StartEndedJob());
  auto gave_up = Register(0, 2);
  ASSERT_TRUE(engine_->Post(RegisterCancelledEvent{gave_up->id()}));
  const auto status = gave_up->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kCancelled);

  ASSERT_NO_FATAL_FAILURE(LeaveAndGo(first_[1]));
  EXPECT_EQ(Status().job().state(), v1::JOB_STATE_IDLE);
  EXPECT_EQ(gave_up->finishes(), 1);
  EXPECT_EQ(JoinJob(2).size(), 2u) << "the next job forms as usual";
}

TEST_F(EngineNextRunTest, ShutdownAnswersWaitingRegistrations) {
  ASSERT_NO_FATAL_FAILURE(StartEndedJob());
  auto waiting = Register(0, 2);
  ASSERT_EQ(Status().job().state(), v1::JOB_STATE_ENDING);
  engine_->Shutdown("test is over");
  const auto status = waiting->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::string(status->message()), "collectived is shutting down (test is over)");
  EXPECT_TRUE(Segments().empty());
}

TEST_F(EngineNextRunTest, AnInvalidRegistrationIsRefusedAtOnceEvenWhileAJobEnds) {
  ASSERT_NO_FATAL_FAILURE(StartEndedJob());
  auto bad = Register(2, 2);
  const auto status = bad->Await();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(status->message()), "local_rank 2 is outside [0, local_size 2)");
}

}  // namespace
}  // namespace collective::daemon::engine
