// daemon/mismatch: agreement across ranks, and the exact Horovod-style
// message for every kind of disagreement.
#include "daemon/mismatch.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace collective::daemon {
namespace {

class MismatchTest : public ::testing::Test {
 protected:
  // A ready tensor 'layer1.weight' of `ranks` identical float32 [17, 3] sum
  // allreduces; global ranks are 10, 11, 12... so that messages must use the
  // rank, not the position.
  ReadyTensor Tensor(int ranks) {
    ReadyTensor tensor{.name = "layer1.weight", .submissions = {}};
    for (int i = 0; i < ranks; ++i) {
      auto client = std::make_unique<ClientRecord>();
      client->topology.set_rank(10 + i);
      Submission submission;
      submission.client = client.get();
      submission.request.set_request_id(100 + i);
      submission.request.set_name(tensor.name);
      submission.request.set_collective(v1::COLLECTIVE_ALLREDUCE);
      submission.request.set_op(v1::REDUCE_OP_SUM);
      submission.request.set_dtype(v1::DATA_TYPE_FLOAT32);
      submission.request.add_shape(17);
      submission.request.add_shape(3);
      submission.request.set_length(17 * 3 * 4);
      tensor.submissions.push_back(std::move(submission));
      clients_.push_back(std::move(client));
    }
    return tensor;
  }

  // CheckAgreement's message after editing rank `index` (position) of three.
  std::string MessageAfter(size_t index, const std::function<void(v1::TensorRequest&)>& edit) {
    ReadyTensor tensor = Tensor(3);
    edit(tensor.submissions[index].request);
    const absl::Status status = CheckAgreement(tensor);
    if (status.ok()) return "OK";
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    return std::string(status.message());
  }

  std::vector<std::unique_ptr<ClientRecord>> clients_;
};

TEST_F(MismatchTest, IdenticalRequestsAgree) {
  EXPECT_TRUE(CheckAgreement(Tensor(1)).ok());
  EXPECT_TRUE(CheckAgreement(Tensor(4)).ok());
}

TEST_F(MismatchTest, PerRankFieldsMayDiffer) {
  // Where each rank's data lies, and its request id, are its own business.
  EXPECT_EQ(MessageAfter(1,
                         [](auto& r) {
                           r.set_offset(4096);
                           r.set_request_id(1);
                         }),
            "OK");
}

TEST_F(MismatchTest, AbsentScaleEqualsOne) {
  EXPECT_EQ(MessageAfter(2,
                         [](auto& r) {
                           r.set_prescale(1.0);
                           r.set_postscale(1.0);
                         }),
            "OK");
}

TEST_F(MismatchTest, CollectiveMessage) {
  EXPECT_EQ(MessageAfter(2, [](auto& r) { r.set_collective(v1::COLLECTIVE_ALLGATHER); }),
            "Mismatched collective operations for 'layer1.weight': rank 10 sent allreduce, rank 12 "
            "sent allgather");
}

TEST_F(MismatchTest, DataTypeMessage) {
  EXPECT_EQ(MessageAfter(1, [](auto& r) { r.set_dtype(v1::DATA_TYPE_FLOAT64); }),
            "Mismatched data types for 'layer1.weight': rank 10 sent float32, rank 11 sent "
            "float64");
}

TEST_F(MismatchTest, ReduceOpMessage) {
  EXPECT_EQ(MessageAfter(2, [](auto& r) { r.set_op(v1::REDUCE_OP_MAX); }),
            "Mismatched reduce ops for 'layer1.weight': rank 10 sent sum, rank 12 sent max");
}

TEST_F(MismatchTest, ShapeMessage) {
  EXPECT_EQ(MessageAfter(2, [](auto& r) { r.set_shape(1, 4); }),
            "Mismatched allreduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "12 sent [17, 4]");
  EXPECT_EQ(MessageAfter(1,
                         [](auto& r) {
                           r.clear_shape();
                           r.add_shape(51);
                         }),
            "Mismatched allreduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent [51]")
      << "same element count, other shape";
  EXPECT_EQ(MessageAfter(1, [](auto& r) { r.add_shape(1); }),
            "Mismatched allreduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent [17, 3, 1]");
  EXPECT_EQ(MessageAfter(1, [](auto& r) { r.clear_shape(); }),
            "Mismatched allreduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent []");
}

TEST_F(MismatchTest, PrescaleMessage) {
  EXPECT_EQ(MessageAfter(1, [](auto& r) { r.set_prescale(0.5); }),
            "Mismatched prescale factors for 'layer1.weight': rank 10 sent 1, rank 11 sent 0.5");
}

TEST_F(MismatchTest, PostscaleMessage) {
  EXPECT_EQ(MessageAfter(2, [](auto& r) { r.set_postscale(0.25); }),
            "Mismatched postscale factors for 'layer1.weight': rank 10 sent 1, rank 12 sent 0.25");
}

TEST_F(MismatchTest, TheFirstRankIsTheReference) {
  // Rank 10 (position 0) differs from both others: it is named with the
  // first of them.
  EXPECT_EQ(MessageAfter(0, [](auto& r) { r.set_dtype(v1::DATA_TYPE_INT32); }),
            "Mismatched data types for 'layer1.weight': rank 10 sent int32, rank 11 sent float32");
}

TEST_F(MismatchTest, FieldsAreCheckedInAFixedOrder) {
  // Several differences: collective, then dtype, op, shape, prescale,
  // postscale.
  EXPECT_EQ(MessageAfter(1,
                         [](auto& r) {
                           r.set_postscale(3);
                           r.set_op(v1::REDUCE_OP_MIN);
                           r.set_dtype(v1::DATA_TYPE_INT8);
                         }),
            "Mismatched data types for 'layer1.weight': rank 10 sent float32, rank 11 sent int8");
  EXPECT_EQ(MessageAfter(1,
                         [](auto& r) {
                           r.set_postscale(3);
                           r.set_shape(0, 1);
                         }),
            "Mismatched allreduce tensor shapes for 'layer1.weight': rank 10 sent [17, 3], rank "
            "11 sent [1, 3]");
}

}  // namespace
}  // namespace collective::daemon
