// Completion (daemon/engine/completion.h): every way a request, a control
// collective or a batch ends, seen in the records a client's ring gets,
// the job's and the daemon's totals, and the hooks — with fake rings, no
// segments and no threads.
#include "daemon/engine/completion.h"

#include <gtest/gtest.h>

#include "tests/unit/engine/fake_rings.h"

namespace collective::daemon::engine {
namespace {

class CompletionTest : public ::testing::Test {
 protected:
  CompletionTest()
      : path_(nullptr, {.max_event_slots = 8, .timeout_seconds = 1}, [](uint64_t) {}),
        gpu_(path_, 1),
        completion_(
            {.timeline = timeline_, .metrics = metrics_, .daemon_totals = daemon_, .gpu = gpu_},
            {.break_job = [this](const absl::Status& why) { broke_ = why; },
             .measured = [this](const exec::FusedBatch&, uint64_t bytes) { measured_ += bytes; }}) {
  }

  static negotiation::Submission SubmissionOf(FakeClient& client, uint64_t request_id,
                                              v1::Collective collective, int32_t set_rank,
                                              uint64_t length = 0) {
    negotiation::Submission submission{
        .client = client.record.get(), .set_rank = set_rank, .rank = set_rank};
    submission.request.set_request_id(request_id);
    submission.request.set_name("t");
    submission.request.set_collective(collective);
    submission.request.set_length(length);
    client.record->outstanding[request_id] = length;
    return submission;
  }

  observe::Timeline daemon_timeline_;
  observe::Timeline job_timeline_;
  observe::JobTimelines timeline_{daemon_timeline_, job_timeline_};
  observe::Metrics metrics_{""};
  v1::Totals daemon_;
  gpu::DevicePath path_;
  gpu::GpuExecutor gpu_;
  absl::Status broke_;
  uint64_t measured_ = 0;
  Completion completion_;
};

TEST_F(CompletionTest, AnErrorReachesTheRankWithItsTextAndCountsInBothTotals) {
  FakeClient client(1);
  client.record->outstanding[7] = 4;
  completion_.CompleteWithError(*client.record, 7, absl::InvalidArgumentError("bad dtype"));
  ASSERT_EQ(client.published.size(), 1u);
  EXPECT_EQ(client.published[0].record.request_id, 7u);
  EXPECT_EQ(client.published[0].record.status_code,
            static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(client.published[0].text, "bad dtype");
  EXPECT_FALSE(client.record->outstanding.contains(7));
  EXPECT_EQ(completion_.totals().errors(), 1u);
  EXPECT_EQ(daemon_.errors(), 1u);
}

TEST_F(CompletionTest, AClientThatIsGoneGetsNoRecordButItsRequestEnds) {
  FakeClient client(1);
  client.record->outstanding[3] = 4;
  client.record->gone = true;
  completion_.CompleteWithError(*client.record, 3, absl::AbortedError("gone"));
  EXPECT_TRUE(client.published.empty());
  EXPECT_FALSE(client.record->outstanding.contains(3));
  EXPECT_EQ(daemon_.errors(), 1u);
}

TEST_F(CompletionTest, AControlCollectiveAnswersEveryRankWithItsValue) {
  FakeClient a(1), b(2, 1);
  negotiation::ReadyTensor tensor{.name = "join", .set_size = 2};
  tensor.submissions.push_back(SubmissionOf(a, 10, v1::COLLECTIVE_JOIN, 0));
  tensor.submissions.push_back(SubmissionOf(b, 20, v1::COLLECTIVE_JOIN, 1));
  completion_.CompleteControl(tensor, 1);
  ASSERT_EQ(a.published.size(), 1u);
  ASSERT_EQ(b.published.size(), 1u);
  EXPECT_EQ(a.published[0].record.request_id, 10u);
  EXPECT_EQ(b.published[0].record.request_id, 20u);
  EXPECT_EQ(a.published[0].record.result_dim0, 1);
  EXPECT_EQ(b.published[0].record.status_code, 0);
  EXPECT_TRUE(a.record->outstanding.empty());
  EXPECT_EQ(completion_.totals().collectives(), 1u);
  EXPECT_EQ(completion_.totals().requests(), 2u);
  EXPECT_EQ(daemon_.requests(), 2u);
}

TEST_F(CompletionTest, AResultInTheRanksOwnOutputHoldsNoResultSpace) {
  FakeClient client(1);
  v1::TensorRequest request;
  request.set_request_id(5);
  client.record->outstanding[5] = 16;
  completion_.Complete(*client.record, request, kNoBlock, 0,
                       {.bytes = 16, .dim0 = 4, .in_output = true}, "t");
  ASSERT_EQ(client.published.size(), 1u);
  EXPECT_NE(client.published[0].record.flags & shm::kRecordResultInOutput, 0u);
  EXPECT_EQ(client.published[0].record.result_bytes, 16u);
  EXPECT_EQ(client.published[0].record.result_dim0, 4);
  EXPECT_TRUE(client.record->held_results.empty());
  EXPECT_EQ(client.record->result_bytes_held, 0u);
}

TEST_F(CompletionTest, AFailedBatchFailsEveryTensorOnEveryRankAndBreaksTheJobWhenItMust) {
  FakeClient a(1), b(2, 1);
  exec::FusedBatch batch;
  for (uint64_t t = 0; t < 2; ++t) {
    negotiation::ReadyTensor tensor{.name = absl::StrCat("t", t), .set_size = 2};
    tensor.submissions.push_back(SubmissionOf(a, 100 + t, v1::COLLECTIVE_ALLREDUCE, 0, 8));
    tensor.submissions.push_back(SubmissionOf(b, 200 + t, v1::COLLECTIVE_ALLREDUCE, 1, 8));
    batch.tensors.push_back(std::move(tensor));
  }
  BatchRun run{.breaks_job = true};
  run.outcome.status = absl::DataLossError("rank 1 truncated its segment");
  completion_.CompleteBatch(batch, run);
  for (FakeClient* client : {&a, &b}) {
    ASSERT_EQ(client->published.size(), 2u);
    for (const PublishedRecord& published : client->published) {
      EXPECT_EQ(published.record.status_code, static_cast<int32_t>(absl::StatusCode::kDataLoss));
      EXPECT_EQ(published.text, "rank 1 truncated its segment");
    }
    EXPECT_TRUE(client->record->outstanding.empty());
  }
  EXPECT_EQ(broke_.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(measured_, 0u);
  EXPECT_EQ(daemon_.errors(), 4u);
}

TEST_F(CompletionTest, AFailedBatchThatDoesNotBreakTheJobLeavesItAlone) {
  FakeClient a(1);
  exec::FusedBatch batch;
  negotiation::ReadyTensor tensor{.name = "t", .set_size = 1};
  tensor.submissions.push_back(SubmissionOf(a, 1, v1::COLLECTIVE_ALLREDUCE, 0, 8));
  batch.tensors.push_back(std::move(tensor));
  BatchRun run;
  run.outcome.status = absl::InvalidArgumentError("mismatch");
  completion_.CompleteBatch(batch, run);
  EXPECT_TRUE(broke_.ok());
  ASSERT_EQ(a.published.size(), 1u);
}

TEST_F(CompletionTest, EachRefusedTensorFailsWithItsOwnError) {
  FakeClient a(1);
  negotiation::PendingTensor first{.name = "x"}, second{.name = "y"};
  first.by_rank.push_back(SubmissionOf(a, 1, v1::COLLECTIVE_ALLREDUCE, 0));
  second.by_rank.push_back(SubmissionOf(a, 2, v1::COLLECTIVE_ALLGATHER, 0));
  std::vector<std::pair<negotiation::PendingTensor, absl::Status>> refused;
  refused.emplace_back(std::move(first), absl::FailedPreconditionError("x refused"));
  refused.emplace_back(std::move(second), absl::FailedPreconditionError("y refused"));
  completion_.FailRefused(std::move(refused));
  ASSERT_EQ(a.published.size(), 2u);
  EXPECT_EQ(a.published[0].record.request_id, 1u);
  EXPECT_EQ(a.published[0].text, "x refused");
  EXPECT_EQ(a.published[1].record.request_id, 2u);
  EXPECT_EQ(a.published[1].text, "y refused");
}

}  // namespace
}  // namespace collective::daemon::engine
