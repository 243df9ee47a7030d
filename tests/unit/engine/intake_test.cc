// Intake (daemon/engine/intake.h): how a client's submissions are read from
// its ring and admitted or refused, with fake rings and a job formed without
// segments — no threads.
#include "daemon/engine/intake.h"

#include <gtest/gtest.h>

#include "tests/unit/engine/fake_rings.h"

namespace collective::daemon::engine {
namespace {

class RecordingRun final : public Intake::Run {
 public:
  void Admitted(job::ClientRecord& client, v1::TensorRequest& request,
                const job::ProcessSet& set) override {
    admitted.push_back({client.id, request.request_id(), set.id});
  }
  void RegisterCuda(job::ClientRecord& client, const v1::RegisterCuda&) override {
    cuda.push_back(client.id);
  }
  void Drop(job::ClientRecord& client, const absl::Status& why) override {
    client.gone = true;
    dropped.emplace_back(client.id, why);
  }
  struct Admission {
    uint64_t client;
    uint64_t request;
    int32_t set;
  };
  std::vector<Admission> admitted;
  std::vector<uint64_t> cuda;
  std::vector<std::pair<uint64_t, absl::Status>> dropped;
};

// A link that counts as an attached session.
class NullLink final : public job::SessionLink {
 public:
  void Send(v1::DaemonMessage) override {}
  void Close(const absl::Status&) override {}
};

class IntakeTest : public ::testing::Test {
 protected:
  IntakeTest()
      : path_(nullptr, {.max_event_slots = 8, .timeout_seconds = 1}, [](uint64_t) {}),
        gpu_(path_, 1),
        completion_(
            {.timeline = timeline_, .metrics = metrics_, .daemon_totals = totals_, .gpu = gpu_},
            {}),
        job_("job", 2, 1, Clock::now() + std::chrono::seconds(10)),
        intake_(config_, completion_, gpu_, timeline_, run_) {
    config_.max_outstanding_requests = 2;
    for (int rank = 0; rank < 2; ++rank) {
      clients_.push_back(std::make_unique<FakeClient>(rank + 1, rank));
    }
  }

  // Forms the job (no result segment: nothing here runs) and attaches both.
  void Form() {
    for (auto& client : clients_) {
      client->record->link = std::make_shared<NullLink>();
      job_.AddMember(std::move(client->record));
    }
    ASSERT_TRUE(job_.Form(nullptr, nullptr, {}, job::NodeLayout::Single(2)).ok());
  }
  job::ClientRecord& Member(int rank) { return *job_.member(rank); }

  static std::string Submit(std::initializer_list<uint64_t> ids, int32_t process_set = 0) {
    v1::ClientMessage message;
    for (uint64_t id : ids) {
      v1::TensorRequest* request = message.mutable_submit()->add_requests();
      request->set_request_id(id);
      request->set_name(absl::StrCat("grad.", id));
      request->set_collective(v1::COLLECTIVE_ALLREDUCE);
      request->set_op(v1::REDUCE_OP_SUM);
      request->set_dtype(v1::DATA_TYPE_FLOAT32);
      request->add_shape(4);
      request->set_offset(0);
      request->set_length(16);
      request->set_process_set_id(process_set);
    }
    return message.SerializeAsString();
  }

  config::DaemonConfig config_;
  observe::Timeline daemon_timeline_;
  observe::Timeline job_timeline_;
  observe::JobTimelines timeline_{daemon_timeline_, job_timeline_};
  observe::Metrics metrics_{""};
  v1::Totals totals_;
  gpu::DevicePath path_;
  gpu::GpuExecutor gpu_;
  Completion completion_;
  job::Job job_;
  RecordingRun run_;
  Intake intake_;
  std::vector<std::unique_ptr<FakeClient>> clients_;
};

TEST_F(IntakeTest, ValidRequestsAreAdmittedInRingOrder) {
  FakeClient& rank0 = *clients_[0];
  rank0.submitted.push_back(Submit({1, 2}));
  Form();
  EXPECT_TRUE(intake_.Drain(job_));
  ASSERT_EQ(run_.admitted.size(), 2u);
  EXPECT_EQ(run_.admitted[0].request, 1u);
  EXPECT_EQ(run_.admitted[1].request, 2u);
  EXPECT_EQ(run_.admitted[0].client, 1u);
  EXPECT_TRUE(rank0.published.empty());
  EXPECT_EQ(Member(0).requests_submitted, 2u);
  EXPECT_FALSE(intake_.Drain(job_));  // nothing more came
}

TEST_F(IntakeTest, AnIdInUseIsRefusedWithoutEndingTheRequestInFlight) {
  FakeClient& rank0 = *clients_[0];
  rank0.submitted.push_back(Submit({7}));
  Form();
  Member(0).outstanding[7] = 16;
  intake_.Drain(job_);
  EXPECT_TRUE(run_.admitted.empty());
  ASSERT_EQ(rank0.published.size(), 1u);
  EXPECT_NE(rank0.published[0].record.flags & shm::kRecordRefusedDuplicateId, 0u);
  EXPECT_EQ(rank0.published[0].text,
            "request id 7 is already in use by a request in flight or a result not yet released");
  EXPECT_TRUE(Member(0).outstanding.contains(7));
}

TEST_F(IntakeTest, AJobThatFailedRefusesWithItsReason) {
  FakeClient& rank1 = *clients_[1];
  rank1.submitted.push_back(Submit({3}));
  Form();
  job_.Fail(absl::AbortedError("rank 0 (pid 1001) died"));
  intake_.Drain(job_);
  EXPECT_TRUE(run_.admitted.empty());
  ASSERT_EQ(rank1.published.size(), 1u);
  EXPECT_EQ(rank1.published[0].record.status_code,
            static_cast<int32_t>(absl::StatusCode::kAborted));
  EXPECT_EQ(rank1.published[0].text, "rank 0 (pid 1001) died");
}

TEST_F(IntakeTest, MoreThanTheOutstandingLimitIsRefused) {
  FakeClient& rank0 = *clients_[0];
  rank0.submitted.push_back(Submit({1}));
  Form();
  Member(0).outstanding[10] = 16;
  Member(0).outstanding[11] = 16;
  intake_.Drain(job_);
  EXPECT_TRUE(run_.admitted.empty());
  ASSERT_EQ(rank0.published.size(), 1u);
  EXPECT_EQ(rank0.published[0].record.status_code,
            static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(rank0.published[0].text.find("the limit is 2 (max_outstanding_requests)"),
            std::string::npos);
}

TEST_F(IntakeTest, AnOffsetPastTheClientsOwnArenaIsRefusedNamingTheField) {
  FakeClient& rank0 = *clients_[0];
  v1::ClientMessage message;
  message.ParseFromString(Submit({4}));
  message.mutable_submit()->mutable_requests(0)->set_offset(1 << 20);
  rank0.submitted.push_back(message.SerializeAsString());
  Form();
  intake_.Drain(job_);
  EXPECT_TRUE(run_.admitted.empty());
  ASSERT_EQ(rank0.published.size(), 1u);
  EXPECT_EQ(rank0.published[0].record.status_code,
            static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(rank0.published[0].text.find("offset"), std::string::npos);
}

TEST_F(IntakeTest, AnUnknownProcessSetIsRefused) {
  FakeClient& rank0 = *clients_[0];
  rank0.submitted.push_back(Submit({5}, /*process_set=*/9));
  Form();
  intake_.Drain(job_);
  EXPECT_TRUE(run_.admitted.empty());
  ASSERT_EQ(rank0.published.size(), 1u);
  EXPECT_NE(rank0.published[0].text.find("request 5 ('grad.5')"), std::string::npos);
}

TEST_F(IntakeTest, BytesThatAreNoMessageDropTheClient) {
  FakeClient& rank0 = *clients_[0];
  rank0.submitted.push_back(std::string("\xff\xff\xff", 3));
  rank0.submitted.push_back(Submit({1}));
  Form();
  EXPECT_TRUE(intake_.Drain(job_));
  ASSERT_EQ(run_.dropped.size(), 1u);
  EXPECT_EQ(run_.dropped[0].first, 1u);
  EXPECT_EQ(run_.dropped[0].second.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(run_.dropped[0].second.message().find("could not be parsed as a ClientMessage"),
            std::string::npos);
  EXPECT_TRUE(run_.admitted.empty());  // nothing after the bad record is read
}

TEST_F(IntakeTest, ACorruptRingDropsTheClient) {
  FakeClient& rank1 = *clients_[1];
  rank1.submitted.push_back(absl::DataLossError("a record's length runs past the ring"));
  Form();
  intake_.Drain(job_);
  ASSERT_EQ(run_.dropped.size(), 1u);
  EXPECT_EQ(run_.dropped[0].second.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(run_.dropped[0].second.message().find("corrupted its submission ring"),
            std::string::npos);
}

TEST_F(IntakeTest, ReleasesAndCudaRegistrationsGoWhereTheyBelong) {
  FakeClient& rank0 = *clients_[0];
  v1::ClientMessage message;
  message.mutable_cuda()->set_registration_id(1);
  message.add_released(99);  // holds no result: nothing happens
  rank0.submitted.push_back(message.SerializeAsString());
  Form();
  intake_.Drain(job_);
  EXPECT_EQ(run_.cuda, std::vector<uint64_t>{1});
  EXPECT_TRUE(rank0.published.empty());
}

}  // namespace
}  // namespace collective::daemon::engine
