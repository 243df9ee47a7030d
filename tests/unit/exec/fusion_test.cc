// daemon/fusion: which ready tensors share a batch — threshold, look-ahead,
// compatibility (root rank included), oversized tensors, threshold 0 — and
// batch sizes, whose slots come from each collective's op.
#include "daemon/exec/fusion.h"

#include <functional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace collective::daemon::exec {
namespace {

using ::testing::ElementsAre;

// A ready float32 sum allreduce of `bytes` (two ranks; compatibility looks
// only at the first submission).
negotiation::ReadyTensor Tensor(const std::string& name, uint64_t bytes,
                                const std::function<void(v1::TensorRequest&)>& edit = {}) {
  negotiation::ReadyTensor tensor{.name = name, .set_size = 2, .submissions = {}};
  for (int rank = 0; rank < 2; ++rank) {
    negotiation::Submission submission;
    submission.set_rank = rank;
    submission.request.set_name(name);
    submission.request.set_collective(v1::COLLECTIVE_ALLREDUCE);
    submission.request.set_op(v1::REDUCE_OP_SUM);
    submission.request.set_dtype(v1::DATA_TYPE_FLOAT32);
    submission.request.add_shape(static_cast<int64_t>(bytes / 4));
    submission.request.set_length(bytes);
    if (edit) edit(submission.request);
    tensor.submissions.push_back(std::move(submission));
  }
  return tensor;
}

// The batches as lists of names.
std::vector<std::vector<std::string>> Plan(std::vector<negotiation::ReadyTensor> tensors,
                                           uint64_t threshold) {
  std::vector<std::vector<std::string>> plan;
  for (const exec::FusedBatch& batch : exec::PlanFusion(std::move(tensors), threshold)) {
    std::vector<std::string> names;
    uint64_t bytes = 0;
    for (const negotiation::ReadyTensor& tensor : batch.tensors) {
      names.push_back(tensor.name);
      bytes += exec::SlotBytes(tensor);
    }
    EXPECT_EQ(batch.bytes, bytes) << "batch bytes are the sum of its slots";
    plan.push_back(names);
  }
  return plan;
}

using Names = std::vector<std::string>;

TEST(FusionTest, SlotsAreRoundedUpToACacheLine) {
  EXPECT_EQ(exec::SlotBytes(Tensor("a", 0)), 0u);
  EXPECT_EQ(exec::SlotBytes(Tensor("a", 4)), 64u);
  EXPECT_EQ(exec::SlotBytes(Tensor("a", 64)), 64u);
  EXPECT_EQ(exec::SlotBytes(Tensor("a", 68)), 128u);
}

// The slot of each collective is its op's: what every rank reads, rounded
// up to a cache line.
TEST(FusionTest, SlotsComeFromTheOps) {
  const auto as = [](v1::Collective collective) {
    return [collective](v1::TensorRequest& r) { r.set_collective(collective); };
  };
  EXPECT_EQ(exec::SlotBytes(Tensor("a", 100, as(v1::COLLECTIVE_REDUCESCATTER))), 128u)
      << "the whole reduction; each rank reads its block of it";
  EXPECT_EQ(exec::SlotBytes(Tensor("a", 100, as(v1::COLLECTIVE_BROADCAST))), 128u);
  EXPECT_EQ(exec::SlotBytes(Tensor("a", 100, as(v1::COLLECTIVE_ALLGATHER))), 256u)
      << "both ranks' 100 bytes, rounded up";
  negotiation::ReadyTensor uneven = Tensor("a", 40, as(v1::COLLECTIVE_ALLGATHER));
  uneven.submissions[1].request.set_shape(0, 1);
  uneven.submissions[1].request.set_length(4);
  EXPECT_EQ(exec::SlotBytes(uneven), 64u) << "44 bytes: first dimensions differ among ranks";
  // Alltoall: per receiving rank, its rows and its received splits, each
  // rounded up: 2 x (2 x 48 bytes -> 128, 2 splits -> 64).
  EXPECT_EQ(exec::SlotBytes(Tensor("a", 96, as(v1::COLLECTIVE_ALLTOALL))), 384u);
}

TEST(FusionTest, BatchesOfEveryCollectiveAddUpTheirSlots) {
  for (v1::Collective collective : {v1::COLLECTIVE_REDUCESCATTER, v1::COLLECTIVE_ALLGATHER,
                                    v1::COLLECTIVE_BROADCAST, v1::COLLECTIVE_ALLTOALL}) {
    std::vector<negotiation::ReadyTensor> tensors;
    for (int i = 0; i < 5; ++i) {
      tensors.push_back(Tensor("t" + std::to_string(i), 64,
                               [collective](auto& r) { r.set_collective(collective); }));
    }
    const uint64_t slot = exec::SlotBytes(tensors[0]);
    // Room for two slots and a half: batches of two.
    EXPECT_THAT(Plan(std::move(tensors), slot * 5 / 2),
                ElementsAre(Names{"t0", "t1"}, Names{"t2", "t3"}, Names{"t4"}))
        << collective;
  }
}

TEST(FusionTest, BroadcastsFuseOnlyWithTheSameRoot) {
  const auto root = [](int32_t rank) {
    return [rank](v1::TensorRequest& r) {
      r.set_collective(v1::COLLECTIVE_BROADCAST);
      r.set_root_rank(rank);
    };
  };
  std::vector<negotiation::ReadyTensor> tensors;
  tensors.push_back(Tensor("r0a", 64, root(0)));
  tensors.push_back(Tensor("r1a", 64, root(1)));
  tensors.push_back(Tensor("r0b", 64, root(0)));
  tensors.push_back(Tensor("r1b", 64, root(1)));
  EXPECT_THAT(Plan(std::move(tensors), 1 << 20),
              ElementsAre(Names{"r0a", "r0b"}, Names{"r1a", "r1b"}));
}

TEST(FusionTest, CpuAndGpuTensorsNeverShareABatch) {
  const auto cuda = [](v1::TensorRequest& r) { r.set_memory(v1::MEMORY_KIND_CUDA); };
  EXPECT_THAT(
      Plan({Tensor("a", 64), Tensor("b", 64, cuda), Tensor("c", 64), Tensor("d", 64, cuda)}, 1024),
      ElementsAre(Names{"a", "c"}, Names{"b", "d"}));
}

TEST(FusionTest, NothingToPlan) { EXPECT_TRUE(exec::PlanFusion({}, 1024).empty()); }

TEST(FusionTest, CompatibleTensorsFuseUpToTheThreshold) {
  // Slots of 128 bytes; 3 fit in 400 (384), a 4th would not (512).
  std::vector<negotiation::ReadyTensor> tensors;
  for (int i = 0; i < 7; ++i) tensors.push_back(Tensor("t" + std::to_string(i), 100));
  EXPECT_THAT(Plan(std::move(tensors), 400),
              ElementsAre(Names{"t0", "t1", "t2"}, Names{"t3", "t4", "t5"}, Names{"t6"}));
}

TEST(FusionTest, ABatchMayFillTheThresholdExactly) {
  std::vector<negotiation::ReadyTensor> tensors;
  for (int i = 0; i < 4; ++i) tensors.push_back(Tensor("t" + std::to_string(i), 128));
  EXPECT_THAT(Plan(std::move(tensors), 256), ElementsAre(Names{"t0", "t1"}, Names{"t2", "t3"}));
}

TEST(FusionTest, ThresholdZeroMeansNoFusion) {
  std::vector<negotiation::ReadyTensor> tensors;
  for (int i = 0; i < 3; ++i) tensors.push_back(Tensor("t" + std::to_string(i), 4));
  EXPECT_THAT(Plan(std::move(tensors), 0), ElementsAre(Names{"t0"}, Names{"t1"}, Names{"t2"}));
}

TEST(FusionTest, ATensorLargerThanTheThresholdRunsAlone) {
  std::vector<negotiation::ReadyTensor> tensors;
  tensors.push_back(Tensor("big", 4096));
  tensors.push_back(Tensor("small1", 64));
  tensors.push_back(Tensor("huge", 1 << 20));
  tensors.push_back(Tensor("small2", 64));
  EXPECT_THAT(Plan(std::move(tensors), 1024),
              ElementsAre(Names{"big"}, Names{"small1", "small2"}, Names{"huge"}));
}

TEST(FusionTest, LooksAheadPastTensorsThatDoNotFit) {
  std::vector<negotiation::ReadyTensor> tensors;
  tensors.push_back(Tensor("a", 256));
  tensors.push_back(Tensor("b", 512));  // 256 + 512 > 600
  tensors.push_back(Tensor("c", 256));  // 512 <= 600
  tensors.push_back(Tensor("d", 64));   // 576
  tensors.push_back(Tensor("e", 64));   // 640 > 600: next batch
  EXPECT_THAT(Plan(std::move(tensors), 600), ElementsAre(Names{"a", "c", "d"}, Names{"b", "e"}));
}

TEST(FusionTest, LooksAheadPastIncompatibleTensors) {
  std::vector<negotiation::ReadyTensor> tensors;
  tensors.push_back(Tensor("f32a", 64));
  tensors.push_back(Tensor("f64", 64, [](auto& r) { r.set_dtype(v1::DATA_TYPE_FLOAT64); }));
  tensors.push_back(Tensor("f32b", 64));
  tensors.push_back(Tensor("max", 64, [](auto& r) { r.set_op(v1::REDUCE_OP_MAX); }));
  tensors.push_back(Tensor("f64b", 64, [](auto& r) { r.set_dtype(v1::DATA_TYPE_FLOAT64); }));
  EXPECT_THAT(Plan(std::move(tensors), 1 << 20),
              ElementsAre(Names{"f32a", "f32b"}, Names{"f64", "f64b"}, Names{"max"}));
}

TEST(FusionTest, EveryKindOfIncompatibilitySeparates) {
  const std::vector<std::function<void(v1::TensorRequest&)>> edits = {
      [](auto& r) { r.set_collective(v1::COLLECTIVE_ALLGATHER); },
      [](auto& r) { r.set_collective(v1::COLLECTIVE_REDUCESCATTER); },
      [](auto& r) { r.set_dtype(v1::DATA_TYPE_INT32); },
      [](auto& r) { r.set_op(v1::REDUCE_OP_PRODUCT); },
      [](auto& r) { r.set_process_set_id(1); },
      [](auto& r) { r.set_prescale(2); },
      [](auto& r) { r.set_postscale(0.5); },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    std::vector<negotiation::ReadyTensor> tensors;
    tensors.push_back(Tensor("plain", 64));
    tensors.push_back(Tensor("other", 64, edits[i]));
    EXPECT_THAT(Plan(std::move(tensors), 1 << 20), ElementsAre(Names{"plain"}, Names{"other"}))
        << "edit " << i;
  }
}

TEST(FusionTest, ExplicitUnitScalesMatchAbsentOnes) {
  std::vector<negotiation::ReadyTensor> tensors;
  tensors.push_back(Tensor("plain", 64));
  tensors.push_back(Tensor("ones", 64, [](auto& r) {
    r.set_prescale(1);
    r.set_postscale(1);
  }));
  tensors.push_back(Tensor("other shape", 256, [](auto& r) {
    r.clear_shape();
    r.add_shape(8);
    r.add_shape(8);
  }));
  EXPECT_THAT(Plan(std::move(tensors), 1 << 20),
              ElementsAre(Names{"plain", "ones", "other shape"}));
}

TEST(FusionTest, ZeroByteTensorsFuse) {
  std::vector<negotiation::ReadyTensor> tensors;
  tensors.push_back(Tensor("empty1", 0));
  tensors.push_back(Tensor("empty2", 0));
  tensors.push_back(Tensor("one", 4));
  EXPECT_THAT(Plan(std::move(tensors), 64), ElementsAre(Names{"empty1", "empty2", "one"}));
}

TEST(FusionTest, SubmissionsTravelWithTheirTensor) {
  std::vector<negotiation::ReadyTensor> tensors;
  tensors.push_back(Tensor("a", 64));
  tensors.push_back(Tensor("b", 64));
  tensors[1].submissions[1].request.set_request_id(42);
  const std::vector<exec::FusedBatch> batches = exec::PlanFusion(std::move(tensors), 1024);
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].tensors.size(), 2u);
  ASSERT_EQ(batches[0].tensors[1].submissions.size(), 2u);
  EXPECT_EQ(batches[0].tensors[1].submissions[1].request.request_id(), 42u);
}

}  // namespace
}  // namespace collective::daemon::exec
