// daemon/gpu/gpu_executor with device_ops.h, on a fake device backend that
// computes in host memory: every collective on every dtype and op against the
// host reference, for clients alone on a device and sharing devices; fusion
// through one NCCL call; the clients' events waited on before and recorded
// after the work; and devices without a member of the set.
#include "daemon/gpu/gpu_executor.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "daemon/exec/ops/ops.h"
#include "tests/common/reference_reduce.h"
#include "tests/unit/gpu/gpu_test_job.h"

namespace collective::daemon::gpu {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

using testing::CompareBitwise;
using testing::CompareClose;
using testing::FillTestData;
using testing::ReferenceReduce;

class GpuCollectivesTest : public ::testing::TestWithParam<Layout> {
 protected:
  GpuCollectivesTest() : job_(GetParam().devices, GetParam().device_count) {}

  std::vector<size_t> Ranks() const { return job_.Ranks(); }

  GpuTestJob job_;
  int next_name_ = 0;
};

constexpr v1::DataType kTypes[] = {
    v1::DATA_TYPE_UINT8,   v1::DATA_TYPE_INT8,    v1::DATA_TYPE_INT32,
    v1::DATA_TYPE_INT64,   v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16,
    v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_FLOAT64, v1::DATA_TYPE_BOOL};
constexpr v1::ReduceOp kOps[] = {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MIN,
                                 v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT};

TEST_P(GpuCollectivesTest, AllreduceMatchesTheHostReferenceForEveryDtypeAndOp) {
  constexpr uint64_t kCount = 37;
  struct Scale {
    double prescale;
    double postscale;
  };
  for (v1::DataType dtype : kTypes) {
    for (v1::ReduceOp op : kOps) {
      const v1::ReduceOp kernel_op = op == v1::REDUCE_OP_AVERAGE ? v1::REDUCE_OP_SUM : op;
      if (!exec::IsReducible(dtype, kernel_op)) continue;
      for (const Scale scale : {Scale{1, 1}, Scale{0.5, 3}}) {
        if (dtype == v1::DATA_TYPE_BOOL && scale.prescale != 1) continue;
        for (const bool in_place : {false, true}) {
          const std::string name = absl::StrCat("t", next_name_++);
          SCOPED_TRACE(absl::StrCat(DataTypeName(dtype), " ", ReduceOpName(op), " scales ",
                                    scale.prescale, "/", scale.postscale,
                                    in_place ? " in place" : ""));
          const uint64_t bytes = kCount * ElementSize(dtype);
          std::vector<v1::TensorRequest> requests;
          std::vector<uint64_t> outputs;
          std::vector<std::vector<std::byte>> inputs(job_.size());
          for (size_t r = 0; r < job_.size(); ++r) {
            const uint64_t input = job_.Memory(r, bytes);
            const uint64_t output = in_place ? input : job_.Memory(r, bytes);
            inputs[r].resize(bytes);
            FillTestData(dtype, kernel_op, r + 1, inputs[r].data(), kCount);
            std::memcpy(job_.Data(r, input), inputs[r].data(), bytes);
            v1::TensorRequest request =
                job_.Request(r, v1::COLLECTIVE_ALLREDUCE, name, dtype,
                             {static_cast<int64_t>(kCount)}, bytes, input, output, bytes);
            request.set_op(op);
            if (scale.prescale != 1) request.set_prescale(scale.prescale);
            if (scale.postscale != 1) request.set_postscale(scale.postscale);
            requests.push_back(request);
            outputs.push_back(output);
          }
          const auto outcome = job_.Run({job_.Ready(name, Ranks(), requests)});
          ASSERT_TRUE(outcome.status.ok()) << outcome.status;

          std::vector<const void*> sources;
          for (const auto& input : inputs) sources.push_back(input.data());
          const exec::ReduceSpec spec{
              .dtype = dtype,
              .op = kernel_op,
              .prescale = scale.prescale,
              .postscale = scale.postscale,
              .divisor = op == v1::REDUCE_OP_AVERAGE ? static_cast<int64_t>(job_.size()) : 1};
          std::vector<std::byte> expected(bytes);
          ReferenceReduce(spec, sources, expected.data(), kCount);
          for (size_t r = 0; r < job_.size(); ++r) {
            EXPECT_EQ(CompareClose(dtype, expected.data(), job_.Data(r, outputs[r]), kCount), "")
                << "rank " << r;
          }
          EXPECT_EQ(job_.backend().scratch_in_use(), 0u);
        }
      }
    }
  }
}

TEST_P(GpuCollectivesTest, FusedAllreduceIsOneNcclCallPerDevice) {
  const std::vector<uint64_t> counts = {5, 100, 1};
  std::vector<negotiation::ReadyTensor> tensors;
  std::vector<std::vector<uint64_t>> outputs(counts.size());
  for (size_t t = 0; t < counts.size(); ++t) {
    const std::string name = absl::StrCat("fused", t);
    std::vector<v1::TensorRequest> requests;
    for (size_t r = 0; r < job_.size(); ++r) {
      const uint64_t bytes = counts[t] * sizeof(float);
      const uint64_t input = job_.Memory(r, bytes);
      outputs[t].push_back(job_.Memory(r, bytes));
      auto* values = reinterpret_cast<float*>(job_.Data(r, input));
      for (uint64_t i = 0; i < counts[t]; ++i) values[i] = static_cast<float>((r + 1) * (i + t));
      v1::TensorRequest request =
          job_.Request(r, v1::COLLECTIVE_ALLREDUCE, name, v1::DATA_TYPE_FLOAT32,
                       {static_cast<int64_t>(counts[t])}, bytes, input, outputs[t].back(), bytes);
      request.set_op(v1::REDUCE_OP_AVERAGE);
      requests.push_back(request);
    }
    tensors.push_back(job_.Ready(name, Ranks(), requests));
  }
  job_.backend().TakeLog();
  ASSERT_TRUE(job_.Run(std::move(tensors)).status.ok());
  const std::vector<std::string> log = job_.backend().TakeLog();
  const auto nccl_calls = std::count_if(log.begin(), log.end(), [](const std::string& entry) {
    return absl::StartsWith(entry, "allreduce");
  });
  EXPECT_EQ(nccl_calls, GetParam().device_count) << "one NCCL call per device for all three";
  EXPECT_EQ(job_.backend().scratch_in_use(), 0u) << "the fusion buffers are freed";
  const float ranks_sum = static_cast<float>(job_.size() * (job_.size() + 1) / 2);
  for (size_t t = 0; t < counts.size(); ++t) {
    for (size_t r = 0; r < job_.size(); ++r) {
      const auto* values = reinterpret_cast<const float*>(job_.Data(r, outputs[t][r]));
      for (uint64_t i = 0; i < counts[t]; ++i) {
        ASSERT_EQ(values[i],
                  ranks_sum * static_cast<float>(i + t) / static_cast<float>(job_.size()))
            << "tensor " << t << " rank " << r << " element " << i;
      }
    }
  }
}

TEST_P(GpuCollectivesTest, EveryClientsReadyEventIsWaitedOnBeforeAndDoneEventRecordedAfter) {
  std::vector<v1::TensorRequest> requests;
  for (size_t r = 0; r < job_.size(); ++r) {
    const uint64_t memory = job_.Memory(r, 16);
    v1::TensorRequest request = job_.Request(r, v1::COLLECTIVE_ALLREDUCE, "ordered",
                                             v1::DATA_TYPE_INT32, {4}, 16, memory, memory, 16);
    request.set_op(v1::REDUCE_OP_SUM);
    requests.push_back(request);
  }
  job_.backend().TakeLog();
  negotiation::ReadyTensor tensor = job_.Ready("ordered", Ranks(), requests);
  ASSERT_TRUE(job_.Run({tensor}).status.ok());
  const std::vector<std::string> log = job_.backend().TakeLog();
  size_t last_wait = 0;
  size_t first_record = log.size();
  for (size_t r = 0; r < job_.size(); ++r) {
    const uint32_t slot = requests[r].event_slot();
    const int device = GetParam().devices[r];
    const auto wait =
        std::find(log.begin(), log.end(), absl::StrCat("wait r", r, ".ready", slot, " @", device));
    const auto record =
        std::find(log.begin(), log.end(), absl::StrCat("record r", r, ".done", slot, " @", device));
    ASSERT_NE(wait, log.end()) << "rank " << r;
    ASSERT_NE(record, log.end()) << "rank " << r;
    last_wait = std::max(last_wait, static_cast<size_t>(wait - log.begin()));
    first_record = std::min(first_record, static_cast<size_t>(record - log.begin()));
  }
  for (size_t i = 0; i < log.size(); ++i) {
    const bool wait = absl::StartsWith(log[i], "wait");
    const bool record = absl::StartsWith(log[i], "record");
    if (!wait && !record) {
      EXPECT_GT(i, last_wait) << log[i] << " before a client's input was ready";
      EXPECT_LT(i, first_record) << log[i] << " after a client was told its output is written";
    }
  }
}

TEST_P(GpuCollectivesTest, BroadcastFromEveryRoot) {
  for (size_t root = 0; root < job_.size(); ++root) {
    const std::string name = absl::StrCat("weights", root);
    std::vector<v1::TensorRequest> requests;
    std::vector<uint64_t> outputs;
    for (size_t r = 0; r < job_.size(); ++r) {
      const uint64_t input = job_.Memory(r, 60);
      outputs.push_back(job_.Memory(r, 60));
      auto* values = reinterpret_cast<float*>(job_.Data(r, input));
      for (int i = 0; i < 15; ++i) values[i] = static_cast<float>(100 * r + i);
      v1::TensorRequest request =
          job_.Request(r, v1::COLLECTIVE_BROADCAST, name, v1::DATA_TYPE_FLOAT32, {5, 3}, 60, input,
                       outputs.back(), 60);
      request.set_root_rank(static_cast<int32_t>(root));
      requests.push_back(request);
    }
    ASSERT_TRUE(job_.Run({job_.Ready(name, Ranks(), requests)}).status.ok());
    for (size_t r = 0; r < job_.size(); ++r) {
      const auto* values = reinterpret_cast<const float*>(job_.Data(r, outputs[r]));
      for (int i = 0; i < 15; ++i) {
        ASSERT_EQ(values[i], static_cast<float>(100 * root + i))
            << "root " << root << " rank " << r;
      }
    }
  }
}

TEST_P(GpuCollectivesTest, AllgatherConcatenatesUnevenRowsInRankOrder) {
  // Rank r sends r + 1 rows of 3 int32.
  std::vector<v1::TensorRequest> requests;
  std::vector<uint64_t> outputs;
  std::vector<int32_t> expected;
  for (size_t r = 0; r < job_.size(); ++r) {
    for (size_t i = 0; i < 3 * (r + 1); ++i) expected.push_back(static_cast<int32_t>(1000 * r + i));
  }
  const uint64_t total = expected.size() * sizeof(int32_t);
  for (size_t r = 0; r < job_.size(); ++r) {
    const uint64_t bytes = 3 * (r + 1) * sizeof(int32_t);
    const uint64_t input = job_.Memory(r, bytes);
    outputs.push_back(job_.Memory(r, total + 8));
    auto* values = reinterpret_cast<int32_t*>(job_.Data(r, input));
    for (size_t i = 0; i < 3 * (r + 1); ++i) values[i] = static_cast<int32_t>(1000 * r + i);
    requests.push_back(job_.Request(r, v1::COLLECTIVE_ALLGATHER, "features", v1::DATA_TYPE_INT32,
                                    {static_cast<int64_t>(r + 1), 3}, bytes, input, outputs.back(),
                                    total + 8));
  }
  ASSERT_TRUE(job_.Run({job_.Ready("features", Ranks(), requests)}).status.ok());
  for (size_t r = 0; r < job_.size(); ++r) {
    EXPECT_EQ(CompareBitwise(v1::DATA_TYPE_INT32, expected.data(), job_.Data(r, outputs[r]),
                             expected.size()),
              "")
        << "rank " << r;
  }
}

TEST_P(GpuCollectivesTest, EmptyTensorsNeedNoAllocation) {
  // Rank 0's allgather share is empty (no allocation: id 0), the others send
  // r rows of 2 float32; and an allreduce of empty tensors, with no
  // allocation on either side, fused with a non-empty one.
  std::vector<float> expected;
  for (size_t r = 1; r < job_.size(); ++r) {
    for (size_t i = 0; i < 2 * r; ++i) expected.push_back(static_cast<float>(100 * r + i));
  }
  const uint64_t total = expected.size() * sizeof(float);
  std::vector<v1::TensorRequest> gathers, empties, ones;
  std::vector<uint64_t> outputs, one_outputs;
  for (size_t r = 0; r < job_.size(); ++r) {
    const uint64_t bytes = 2 * r * sizeof(float);
    const uint64_t input = r == 0 ? 0 : job_.Memory(r, bytes);
    for (size_t i = 0; r > 0 && i < 2 * r; ++i) {
      reinterpret_cast<float*>(job_.Data(r, input))[i] = static_cast<float>(100 * r + i);
    }
    outputs.push_back(job_.Memory(r, total));
    gathers.push_back(job_.Request(r, v1::COLLECTIVE_ALLGATHER, "rows", v1::DATA_TYPE_FLOAT32,
                                   {static_cast<int64_t>(r), 2}, bytes, input, outputs.back(),
                                   total));
  }
  ASSERT_TRUE(job_.Run({job_.Ready("rows", Ranks(), gathers)}).status.ok());
  for (size_t r = 0; r < job_.size(); ++r) {
    EXPECT_EQ(CompareBitwise(v1::DATA_TYPE_FLOAT32, expected.data(), job_.Data(r, outputs[r]),
                             expected.size()),
              "")
        << "rank " << r;
  }
  for (size_t r = 0; r < job_.size(); ++r) {
    v1::TensorRequest empty =
        job_.Request(r, v1::COLLECTIVE_ALLREDUCE, "empty", v1::DATA_TYPE_FLOAT32, {0}, 0, 0, 0, 0);
    empty.set_op(v1::REDUCE_OP_SUM);
    empties.push_back(empty);
    const uint64_t one = job_.Memory(r, sizeof(float));
    *reinterpret_cast<float*>(job_.Data(r, one)) = 1.0F;
    one_outputs.push_back(one);
    v1::TensorRequest request =
        job_.Request(r, v1::COLLECTIVE_ALLREDUCE, "one", v1::DATA_TYPE_FLOAT32, {1}, sizeof(float),
                     one, one, sizeof(float));
    request.set_op(v1::REDUCE_OP_SUM);
    ones.push_back(request);
  }
  ASSERT_TRUE(job_.Run({job_.Ready("empty", Ranks(), empties), job_.Ready("one", Ranks(), ones)})
                  .status.ok());
  for (size_t r = 0; r < job_.size(); ++r) {
    EXPECT_EQ(*reinterpret_cast<float*>(job_.Data(r, one_outputs[r])),
              static_cast<float>(job_.size()))
        << "rank " << r;
  }
}

TEST_P(GpuCollectivesTest, AlltoallSendsEachRankItsRows) {
  // Rank r sends (r + j) % 3 rows of 2 float64 to rank j; element values
  // name the sender, receiver and position.
  const size_t k = job_.size();
  std::vector<std::vector<int64_t>> splits(k, std::vector<int64_t>(k));
  for (size_t r = 0; r < k; ++r) {
    for (size_t j = 0; j < k; ++j) splits[r][j] = static_cast<int64_t>((r + j) % 3);
  }
  std::vector<v1::TensorRequest> requests;
  std::vector<uint64_t> outputs;
  for (size_t r = 0; r < k; ++r) {
    const int64_t rows = std::accumulate(splits[r].begin(), splits[r].end(), int64_t{0});
    int64_t received = 0;
    for (size_t s = 0; s < k; ++s) received += splits[s][r];
    const uint64_t bytes = static_cast<uint64_t>(rows) * 16;
    const uint64_t input = job_.Memory(r, std::max<uint64_t>(bytes, 1));
    outputs.push_back(job_.Memory(r, static_cast<uint64_t>(received) * 16 + 1));
    auto* values = reinterpret_cast<double*>(job_.Data(r, input));
    size_t at = 0;
    for (size_t j = 0; j < k; ++j) {
      for (int64_t row = 0; row < splits[r][j]; ++row) {
        values[at++] = static_cast<double>(100 * r + 10 * j + row);
        values[at++] = -static_cast<double>(100 * r + 10 * j + row);
      }
    }
    v1::TensorRequest request =
        job_.Request(r, v1::COLLECTIVE_ALLTOALL, "tokens", v1::DATA_TYPE_FLOAT64, {rows, 2}, bytes,
                     input, outputs.back(), static_cast<uint64_t>(received) * 16 + 1);
    for (int64_t split : splits[r]) request.add_splits(split);
    requests.push_back(request);
  }
  const negotiation::ReadyTensor tensor = job_.Ready("tokens", Ranks(), requests);
  ASSERT_TRUE(exec::ops::AlltoallOp().Check(tensor).ok());
  ASSERT_TRUE(job_.Run({tensor}).status.ok());
  for (size_t j = 0; j < k; ++j) {
    const auto* values = reinterpret_cast<const double*>(job_.Data(j, outputs[j]));
    size_t at = 0;
    for (size_t s = 0; s < k; ++s) {
      for (int64_t row = 0; row < splits[s][j]; ++row) {
        ASSERT_EQ(values[at++], static_cast<double>(100 * s + 10 * j + row)) << "rank " << j;
        ASSERT_EQ(values[at++], -static_cast<double>(100 * s + 10 * j + row)) << "rank " << j;
      }
    }
  }
}

TEST_P(GpuCollectivesTest, ReducescatterGivesEachRankItsBlockOfTheReduction) {
  // 2K + 1 rows of 4 float32: the first rank gets one row more.
  const size_t k = job_.size();
  const int64_t rows = static_cast<int64_t>(2 * k + 1);
  const uint64_t count = static_cast<uint64_t>(rows) * 4;
  for (const v1::ReduceOp op : {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE}) {
    const std::string name = absl::StrCat("grad", ReduceOpName(op));
    std::vector<std::vector<float>> inputs(k, std::vector<float>(count));
    std::vector<v1::TensorRequest> requests;
    std::vector<uint64_t> outputs;
    for (size_t r = 0; r < k; ++r) {
      const uint64_t input = job_.Memory(r, count * sizeof(float));
      outputs.push_back(job_.Memory(r, 3 * 4 * sizeof(float)));
      for (uint64_t i = 0; i < count; ++i) inputs[r][i] = static_cast<float>((r + 1) * i);
      std::memcpy(job_.Data(r, input), inputs[r].data(), count * sizeof(float));
      v1::TensorRequest request =
          job_.Request(r, v1::COLLECTIVE_REDUCESCATTER, name, v1::DATA_TYPE_FLOAT32, {rows, 4},
                       count * sizeof(float), input, outputs.back(), 3 * 4 * sizeof(float));
      request.set_op(op);
      requests.push_back(request);
    }
    const negotiation::ReadyTensor tensor = job_.Ready(name, Ranks(), requests);
    ASSERT_TRUE(job_.Run({tensor}).status.ok());
    const float sum_of_ranks = static_cast<float>(k * (k + 1) / 2);
    for (size_t r = 0; r < k; ++r) {
      const exec::ops::RankResult block = exec::ops::ReducescatterOp().ResultOf(tensor, r);
      const auto* values = reinterpret_cast<const float*>(job_.Data(r, outputs[r]));
      const uint64_t first = block.offset / sizeof(float);
      for (uint64_t i = 0; i < block.bytes / sizeof(float); ++i) {
        float expected = sum_of_ranks * static_cast<float>(first + i);
        if (op == v1::REDUCE_OP_AVERAGE) expected *= 1.0f / static_cast<float>(k);
        ASSERT_EQ(values[i], expected) << ReduceOpName(op) << " rank " << r << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuCollectivesTest, ::testing::ValuesIn(Layouts()),
                         [](const auto& param_info) { return param_info.param.name; });

// Four clients, two per device: a process set of ranks 0 and 1 (both on
// device 0) still needs device 1 in the NCCL call, with the op's identity.
TEST(GpuSubsetTest, DevicesWithoutAMemberOfTheSetContributeTheIdentity) {
  GpuTestJob job({0, 0, 1, 1}, 2);
  for (const v1::ReduceOp op :
       {v1::REDUCE_OP_SUM, v1::REDUCE_OP_MIN, v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT}) {
    const std::string name = absl::StrCat("subset", ReduceOpName(op));
    std::vector<v1::TensorRequest> requests;
    std::vector<uint64_t> outputs;
    for (size_t r : {size_t{0}, size_t{1}}) {
      const uint64_t input = job.Memory(r, 8);
      outputs.push_back(job.Memory(r, 8));
      auto* values = reinterpret_cast<int32_t*>(job.Data(r, input));
      values[0] = static_cast<int32_t>(r) + 2;
      values[1] = -static_cast<int32_t>(r) - 5;
      v1::TensorRequest request = job.Request(
          r, v1::COLLECTIVE_ALLREDUCE, name, v1::DATA_TYPE_INT32, {2}, 8, input, outputs.back(), 8);
      request.set_op(op);
      request.set_process_set_id(1);
      requests.push_back(request);
    }
    negotiation::ReadyTensor tensor = job.Ready(name, {0, 1}, requests);
    tensor.process_set_id = 1;
    ASSERT_TRUE(job.Run({tensor}).status.ok());
    const std::vector<int32_t> expected = op == v1::REDUCE_OP_SUM   ? std::vector<int32_t>{5, -11}
                                          : op == v1::REDUCE_OP_MIN ? std::vector<int32_t>{2, -6}
                                          : op == v1::REDUCE_OP_MAX ? std::vector<int32_t>{3, -5}
                                                                    : std::vector<int32_t>{6, 30};
    for (size_t i = 0; i < 2; ++i) {
      const auto* values = reinterpret_cast<const int32_t*>(job.Data(i, outputs[i]));
      EXPECT_EQ(std::vector<int32_t>(values, values + 2), expected) << ReduceOpName(op);
    }
  }
}

// Horovod's join: a rank that joined contributes zeros, and the average
// still divides by the whole set.
TEST(GpuJoinTest, JoinedRanksContributeZeros) {
  GpuTestJob job({0, 1, 1}, 2);
  for (const v1::ReduceOp op : {v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MIN}) {
    const std::string name = absl::StrCat("joined", ReduceOpName(op));
    std::vector<v1::TensorRequest> requests;
    std::vector<uint64_t> outputs;
    for (size_t r : {size_t{0}, size_t{2}}) {
      const uint64_t input = job.Memory(r, 4);
      outputs.push_back(job.Memory(r, 4));
      *reinterpret_cast<float*>(job.Data(r, input)) = 3.0f * static_cast<float>(r + 1);
      v1::TensorRequest request =
          job.Request(r, v1::COLLECTIVE_ALLREDUCE, name, v1::DATA_TYPE_FLOAT32, {1}, 4, input,
                      outputs.back(), 4);
      request.set_op(op);
      requests.push_back(request);
    }
    // Rank 1 has joined: the set has 3 ranks, 2 submitted.
    negotiation::ReadyTensor tensor = job.Ready(name, {0, 2}, requests, /*set_size=*/3);
    tensor.submissions[1].set_rank = 2;
    ASSERT_TRUE(job.Run({tensor}).status.ok());
    const float expected = op == v1::REDUCE_OP_AVERAGE ? (3.0f + 9.0f) * (1.0f / 3.0f) : 0.0f;
    EXPECT_EQ(*reinterpret_cast<const float*>(job.Data(0, outputs[0])), expected);
    EXPECT_EQ(*reinterpret_cast<const float*>(job.Data(2, outputs[1])), expected);
  }
}

// Node 0's check of CUDA tensors that span nodes: every rank's request.
negotiation::ReadyTensor AcrossNodes(v1::Collective collective, int32_t set_id, int32_t set_size,
                                     int32_t submitted) {
  negotiation::ReadyTensor everyone;
  everyone.name = "w";
  everyone.process_set_id = set_id;
  everyone.set_size = set_size;
  for (int32_t rank = 0; rank < submitted; ++rank) {
    v1::TensorRequest request;
    request.set_name("w");
    request.set_collective(collective);
    request.set_memory(v1::MEMORY_KIND_CUDA);
    request.set_dtype(v1::DATA_TYPE_FLOAT32);
    request.add_shape(4);
    request.set_length(16);
    request.mutable_device_output()->set_bytes(16);
    everyone.submissions.push_back(
        negotiation::Submission{.set_rank = rank, .rank = rank, .request = request});
  }
  return everyone;
}

TEST(GpuAcrossNodesTest, AllreduceOfTheGlobalSetWithEveryRankRuns) {
  const negotiation::ReadyTensor everyone = AcrossNodes(v1::COLLECTIVE_ALLREDUCE, 0, 4, 4);
  EXPECT_TRUE(GpuExecutor::CheckAcrossNodes(everyone).ok());
}

TEST(GpuAcrossNodesTest, AnOutputTooSmallIsRefusedAsOnOneNode) {
  negotiation::ReadyTensor everyone = AcrossNodes(v1::COLLECTIVE_ALLREDUCE, 0, 2, 2);
  everyone.submissions[1].request.mutable_device_output()->set_bytes(8);
  const absl::Status status = GpuExecutor::CheckAcrossNodes(everyone);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("rank 1's output holds 8 bytes; its result needs 16"));
}

TEST(GpuAcrossNodesTest, WhatNeedsMoreThanTheJobsCommunicatorIsRefusedSayingWhy) {
  for (v1::Collective collective : {v1::COLLECTIVE_ALLGATHER, v1::COLLECTIVE_BROADCAST,
                                    v1::COLLECTIVE_ALLTOALL, v1::COLLECTIVE_REDUCESCATTER}) {
    const absl::Status status = GpuExecutor::CheckAcrossNodes(AcrossNodes(collective, 0, 2, 2));
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(status.message(), HasSubstr("of CUDA tensor 'w' spans nodes"));
    EXPECT_THAT(status.message(), HasSubstr("runs allreduce only"));
  }
  const absl::Status subset =
      GpuExecutor::CheckAcrossNodes(AcrossNodes(v1::COLLECTIVE_ALLREDUCE, 3, 2, 2));
  EXPECT_EQ(subset.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(subset.message(), HasSubstr("on process set 3 spans nodes"));
  const absl::Status joined =
      GpuExecutor::CheckAcrossNodes(AcrossNodes(v1::COLLECTIVE_ALLREDUCE, 0, 4, 3));
  EXPECT_EQ(joined.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(joined.message(), HasSubstr("while ranks have joined"));
}

// A batch whose memory went away between admission and its turn: on one
// node only its tensors fail; across nodes the other nodes' NCCL calls wait
// for this node's part, so the job cannot go on.
TEST(GpuAcrossNodesTest, AResolveFailureBreaksOnlyABatchThatSpansNodes) {
  for (const bool across_nodes : {false, true}) {
    SCOPED_TRACE(across_nodes ? "across nodes" : "one node");
    GpuTestJob job({0}, 1);
    const uint64_t memory = job.Memory(0, 16);
    negotiation::ReadyTensor tensor =
        job.Ready("w", {0},
                  {job.Request(0, v1::COLLECTIVE_ALLREDUCE, "w", v1::DATA_TYPE_FLOAT32, {4}, 16,
                               memory, memory, 16)});
    tensor.across_nodes = across_nodes;
    v1::RegisterCuda unregister;
    unregister.add_unregister(memory);
    ASSERT_TRUE(job.executor().Register(job.client(0).record.id, unregister).ok());
    exec::FusedBatch batch;
    batch.tensors.push_back(std::move(tensor));
    int shared = 0;
    const GpuExecutor::Outcome outcome = job.executor().Run(
        batch, [&](int devices, const NewUniqueId& new_id) -> absl::StatusOr<GlobalLayout> {
          ++shared;
          ASSIGN_OR_RETURN(std::string id, new_id());
          return GlobalLayout{.ranks = devices, .first_rank = 0, .unique_id = std::move(id)};
        });
    EXPECT_THAT(outcome.status.message(), HasSubstr("not registered"));
    EXPECT_EQ(outcome.broken, across_nodes);
    EXPECT_EQ(shared, across_nodes ? 1 : 0) << "the communicator across nodes forms first";
  }
}

// Node 0 could not make the unique id: the share says so, and forming the
// communicator fails (every node alike) instead of proceeding without one.
TEST(GpuAcrossNodesTest, ACommunicatorThatCannotFormBreaksTheJob) {
  GpuTestJob job({0}, 1);
  const uint64_t memory = job.Memory(0, 16);
  negotiation::ReadyTensor tensor =
      job.Ready("w", {0},
                {job.Request(0, v1::COLLECTIVE_ALLREDUCE, "w", v1::DATA_TYPE_FLOAT32, {4}, 16,
                             memory, memory, 16)});
  tensor.across_nodes = true;
  exec::FusedBatch batch;
  batch.tensors.push_back(std::move(tensor));
  const GpuExecutor::Outcome outcome =
      job.executor().Run(batch, [](int, const NewUniqueId&) -> absl::StatusOr<GlobalLayout> {
        return absl::UnavailableError("node 0 could not make the NCCL unique id");
      });
  EXPECT_TRUE(outcome.broken);
  EXPECT_THAT(outcome.status.message(), HasSubstr("cannot form the job's NCCL communicator"));
  EXPECT_THAT(outcome.status.message(), HasSubstr("node 0 could not make the NCCL unique id"));
}

}  // namespace
}  // namespace collective::daemon::gpu
