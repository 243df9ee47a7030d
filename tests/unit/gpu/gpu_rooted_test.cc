// The rooted collectives (reduce, gather, scatter) and point-to-point
// messages of daemon/gpu on the fake device backend: every root and every
// pair of ranks, for clients alone on a device and sharing devices; ranks
// that receive nothing keep their memory; ranges of one client that overlap
// where the work would read what it writes are refused before they run.
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/negotiation/message_matcher.h"
#include "tests/unit/gpu/gpu_test_job.h"

namespace collective::daemon::gpu {
namespace {

using ::testing::HasSubstr;

// What a rank's output holds until something writes it.
constexpr float kUntouched = -7.0f;

class GpuRootedTest : public ::testing::TestWithParam<Layout> {
 protected:
  GpuRootedTest() : job_(GetParam().devices, GetParam().device_count) {}

  std::vector<size_t> Ranks() const { return job_.Ranks(); }

  // `count` float32 of rank `rank`, each `value(i)`.
  template <class Value>
  uint64_t Floats(size_t rank, uint64_t count, Value value) {
    const uint64_t id = job_.Memory(rank, count * sizeof(float));
    auto* data = reinterpret_cast<float*>(job_.Data(rank, id));
    for (uint64_t i = 0; i < count; ++i) data[i] = value(i);
    return id;
  }
  const float* Values(size_t rank, uint64_t id) {
    return reinterpret_cast<const float*>(job_.Data(rank, id));
  }
  size_t Size() const { return job_.size(); }

  GpuTestJob job_;
};

TEST_P(GpuRootedTest, ReduceLeavesTheReductionAtTheRootOnly) {
  constexpr uint64_t kCount = 21;
  for (const v1::ReduceOp op : {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MAX}) {
    for (size_t root = 0; root < Size(); ++root) {
      for (const bool in_place : {false, true}) {
        const std::string name = absl::StrCat("loss.", ReduceOpName(op), root, in_place);
        SCOPED_TRACE(name);
        std::vector<v1::TensorRequest> requests;
        std::vector<uint64_t> outputs;
        for (size_t r = 0; r < Size(); ++r) {
          const uint64_t input =
              Floats(r, kCount, [r](uint64_t i) { return static_cast<float>((r + 1) * i); });
          outputs.push_back(in_place ? input
                                     : Floats(r, kCount, [](uint64_t) { return kUntouched; }));
          v1::TensorRequest request = job_.Request(
              r, v1::COLLECTIVE_REDUCE, name, v1::DATA_TYPE_FLOAT32, {static_cast<int64_t>(kCount)},
              kCount * sizeof(float), input, outputs.back(), kCount * sizeof(float));
          request.set_op(op);
          request.set_root_rank(static_cast<int32_t>(root));
          requests.push_back(request);
        }
        const negotiation::ReadyTensor tensor = job_.Ready(name, Ranks(), requests);
        ASSERT_TRUE(GpuExecutor::Check(tensor).ok());
        ASSERT_TRUE(job_.Run({tensor}).status.ok());
        const float ranks = static_cast<float>(Size() * (Size() + 1) / 2);
        for (size_t r = 0; r < Size(); ++r) {
          for (uint64_t i = 0; i < kCount; ++i) {
            float expected = static_cast<float>((r + 1) * i);  // in place: its own input
            if (!in_place) expected = kUntouched;
            if (r == root) {
              expected = op == v1::REDUCE_OP_MAX ? static_cast<float>(Size() * i)
                                                 : ranks * static_cast<float>(i);
              if (op == v1::REDUCE_OP_AVERAGE) expected *= 1.0f / static_cast<float>(Size());
            }
            ASSERT_EQ(Values(r, outputs[r])[i], expected) << "rank " << r << " element " << i;
          }
        }
      }
    }
  }
}

TEST_P(GpuRootedTest, GatherConcatenatesUnevenRowsAtTheRootOnly) {
  // Rank r sends r + 1 rows of 2 float32: 100 r + i.
  uint64_t total = 0;
  for (size_t r = 0; r < Size(); ++r) total += 2 * (r + 1);
  for (size_t root = 0; root < Size(); ++root) {
    const std::string name = absl::StrCat("rows", root);
    std::vector<v1::TensorRequest> requests;
    std::vector<uint64_t> outputs;
    for (size_t r = 0; r < Size(); ++r) {
      const uint64_t count = 2 * (r + 1);
      const uint64_t input =
          Floats(r, count, [r](uint64_t i) { return static_cast<float>(100 * r + i); });
      outputs.push_back(Floats(r, total, [](uint64_t) { return kUntouched; }));
      v1::TensorRequest request = job_.Request(
          r, v1::COLLECTIVE_GATHER, name, v1::DATA_TYPE_FLOAT32, {static_cast<int64_t>(r + 1), 2},
          count * sizeof(float), input, outputs.back(), r == root ? total * sizeof(float) : 0);
      request.set_root_rank(static_cast<int32_t>(root));
      requests.push_back(request);
    }
    const negotiation::ReadyTensor tensor = job_.Ready(name, Ranks(), requests);
    ASSERT_TRUE(GpuExecutor::Check(tensor).ok());
    ASSERT_TRUE(job_.Run({tensor}).status.ok());
    for (size_t r = 0; r < Size(); ++r) {
      uint64_t at = 0;
      for (size_t sender = 0; sender < Size(); ++sender) {
        for (uint64_t i = 0; i < 2 * (sender + 1); ++i, ++at) {
          const float expected = r == root ? static_cast<float>(100 * sender + i) : kUntouched;
          ASSERT_EQ(Values(r, outputs[r])[at], expected) << "root " << root << " rank " << r;
        }
      }
    }
  }
}

TEST_P(GpuRootedTest, ScatterGivesEachRankItsRowsOfTheRoots) {
  // Rank r receives r + 1 rows of 3 float32; the root's row k holds 10 k.
  uint64_t rows = 0;
  for (size_t r = 0; r < Size(); ++r) rows += r + 1;
  for (size_t root = 0; root < Size(); ++root) {
    const std::string name = absl::StrCat("shards", root);
    std::vector<v1::TensorRequest> requests;
    std::vector<uint64_t> outputs;
    for (size_t r = 0; r < Size(); ++r) {
      const uint64_t mine = r == root ? rows : 0;
      const uint64_t input = Floats(r, 3 * std::max<uint64_t>(mine, 1),
                                    [](uint64_t i) { return static_cast<float>(10 * (i / 3)); });
      outputs.push_back(Floats(r, 3 * (r + 1), [](uint64_t) { return kUntouched; }));
      v1::TensorRequest request = job_.Request(
          r, v1::COLLECTIVE_SCATTER, name, v1::DATA_TYPE_FLOAT32, {static_cast<int64_t>(mine), 3},
          3 * mine * sizeof(float), input, outputs.back(), 3 * (r + 1) * sizeof(float));
      request.set_root_rank(static_cast<int32_t>(root));
      request.set_receive_rows(static_cast<int64_t>(r + 1));
      requests.push_back(request);
    }
    const negotiation::ReadyTensor tensor = job_.Ready(name, Ranks(), requests);
    ASSERT_TRUE(GpuExecutor::Check(tensor).ok());
    ASSERT_TRUE(job_.Run({tensor}).status.ok());
    uint64_t first = 0;
    for (size_t r = 0; r < Size(); ++r) {
      for (uint64_t i = 0; i < 3 * (r + 1); ++i) {
        ASSERT_EQ(Values(r, outputs[r])[i], static_cast<float>(10 * (first + i / 3)))
            << "root " << root << " rank " << r << " element " << i;
      }
      first += r + 1;
    }
  }
}

// A matched send of rank `from` and receive of rank `to`, as the message
// matcher hands it over (the send first, each with its set rank).
negotiation::ReadyTensor Message(GpuTestJob& job, size_t from, size_t to, uint64_t input,
                                 uint64_t output, uint64_t count) {
  const std::string name =
      negotiation::MessageName(0, static_cast<int32_t>(from), static_cast<int32_t>(to), 4);
  const uint64_t bytes = count * sizeof(float);
  v1::TensorRequest send = job.Request(from, v1::COLLECTIVE_SEND, name, v1::DATA_TYPE_FLOAT32,
                                       {static_cast<int64_t>(count)}, bytes, input, 0, 0);
  send.set_peer_rank(static_cast<int32_t>(to));
  v1::TensorRequest receive =
      job.Request(to, v1::COLLECTIVE_RECV, name, v1::DATA_TYPE_FLOAT32,
                  {static_cast<int64_t>(count)}, bytes, output, output, bytes);
  receive.set_peer_rank(static_cast<int32_t>(from));
  negotiation::ReadyTensor tensor = job.Ready(name, {from, to}, {send, receive}, 0);
  tensor.set_size = static_cast<int32_t>(job.size());
  tensor.submissions[0].set_rank = static_cast<int32_t>(from);
  tensor.submissions[1].set_rank = static_cast<int32_t>(to);
  return tensor;
}

TEST_P(GpuRootedTest, AMessageMovesTheSendersBytesIntoTheReceiversOutput) {
  constexpr uint64_t kCount = 19;
  for (size_t from = 0; from < Size(); ++from) {
    for (size_t to = 0; to < Size(); ++to) {
      SCOPED_TRACE(absl::StrCat(from, " to ", to));
      const uint64_t input =
          Floats(from, kCount, [from](uint64_t i) { return static_cast<float>(1000 * from + i); });
      const uint64_t output = Floats(to, kCount, [](uint64_t) { return kUntouched; });
      const negotiation::ReadyTensor tensor = Message(job_, from, to, input, output, kCount);
      ASSERT_TRUE(GpuExecutor::Check(tensor).ok());
      ASSERT_TRUE(job_.Run({tensor}).status.ok());
      for (uint64_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(Values(to, output)[i], static_cast<float>(1000 * from + i));
        ASSERT_EQ(Values(from, input)[i], static_cast<float>(1000 * from + i));
      }
    }
  }
}

TEST_P(GpuRootedTest, MessagesFusedIntoOneBatchEachReachTheirReceiver) {
  // Every rank sends to the next one, all in one batch.
  constexpr uint64_t kCount = 5;
  std::vector<negotiation::ReadyTensor> tensors;
  std::vector<uint64_t> outputs;
  for (size_t from = 0; from < Size(); ++from) {
    const size_t to = (from + 1) % Size();
    const uint64_t input =
        Floats(from, kCount, [from](uint64_t i) { return static_cast<float>(10 * from + i); });
    outputs.push_back(Floats(to, kCount, [](uint64_t) { return kUntouched; }));
    tensors.push_back(Message(job_, from, to, input, outputs.back(), kCount));
  }
  ASSERT_TRUE(job_.Run(tensors).status.ok());
  for (size_t from = 0; from < Size(); ++from) {
    const size_t to = (from + 1) % Size();
    for (uint64_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(Values(to, outputs[from])[i], static_cast<float>(10 * from + i));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuRootedTest, ::testing::ValuesIn(Layouts()),
                         [](const auto& param_info) { return param_info.param.name; });

// Two ranks on two devices; requests that name ranges of one allocation.
class GpuAliasingTest : public ::testing::Test {
 protected:
  GpuAliasingTest() : job_({0, 1}, 2) {}

  // A request of rank `rank` whose input and output lie in `allocation`,
  // at these offsets.
  v1::TensorRequest Within(size_t rank, v1::Collective collective, uint64_t allocation,
                           uint64_t input_at, uint64_t length, uint64_t output_at,
                           uint64_t output_bytes, int64_t rows) {
    v1::TensorRequest request =
        job_.Request(rank, collective, "t", v1::DATA_TYPE_FLOAT32, {rows, 2}, length, allocation,
                     allocation, output_bytes);
    request.mutable_device_input()->set_offset(input_at);
    request.mutable_device_output()->set_offset(output_at);
    return request;
  }

  GpuTestJob job_;
};

TEST_F(GpuAliasingTest, AScatterRootWhoseOutputOverlapsItsInputIsRefused) {
  const uint64_t root_memory = job_.Memory(0, 64);
  const uint64_t other = job_.Memory(1, 64);
  v1::TensorRequest root = Within(0, v1::COLLECTIVE_SCATTER, root_memory, 0, 32, 8, 16, 4);
  root.set_receive_rows(2);
  v1::TensorRequest receiver = Within(1, v1::COLLECTIVE_SCATTER, other, 0, 0, 0, 16, 0);
  receiver.set_receive_rows(2);
  for (v1::TensorRequest* request : {&root, &receiver}) request->set_root_rank(0);
  const absl::Status status = GpuExecutor::Check(job_.Ready("t", {0, 1}, {root, receiver}));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("scatter of 't': root rank 0's output (16 bytes at "
                                          "offset 8 of allocation 1) overlaps its input"));
}

TEST_F(GpuAliasingTest, AGatherRootsInputMayLieOnlyAtItsOwnRowsPlace) {
  const uint64_t root_memory = job_.Memory(1, 64);
  const uint64_t other = job_.Memory(0, 64);
  auto* values = reinterpret_cast<float*>(job_.Data(0, other));
  for (int i = 0; i < 4; ++i) values[i] = static_cast<float>(i + 1);
  auto* root_values = reinterpret_cast<float*>(job_.Data(1, root_memory));
  for (int i = 0; i < 4; ++i) root_values[4 + i] = static_cast<float>(10 + i);
  // Rank 1 (the root) gathers 2 rows from rank 0, then its own 2 rows,
  // which already lie where they belong: bytes 16..31 of its output.
  const auto gather = [&](uint64_t root_input_at) {
    v1::TensorRequest sender = Within(0, v1::COLLECTIVE_GATHER, other, 0, 16, 0, 0, 2);
    v1::TensorRequest root =
        Within(1, v1::COLLECTIVE_GATHER, root_memory, root_input_at, 16, 0, 32, 2);
    for (v1::TensorRequest* request : {&sender, &root}) request->set_root_rank(1);
    return job_.Ready("t", {0, 1}, {sender, root});
  };
  const negotiation::ReadyTensor in_place = gather(16);
  ASSERT_TRUE(GpuExecutor::Check(in_place).ok());
  ASSERT_TRUE(job_.Run({in_place}).status.ok());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(root_values[i], i < 4 ? static_cast<float>(i + 1) : static_cast<float>(6 + i));
  }
  const absl::Status shifted = GpuExecutor::Check(gather(8));
  EXPECT_EQ(shifted.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shifted.message(), HasSubstr("other than at its own rows' place (offset 16)"));
}

TEST_F(GpuAliasingTest, ASelfSendIntoAPartlyOverlappingRangeIsRefused) {
  const uint64_t memory = job_.Memory(0, 64);
  const auto self_send = [&](uint64_t output_at) {
    v1::TensorRequest send = Within(0, v1::COLLECTIVE_SEND, memory, 0, 16, 0, 0, 2);
    v1::TensorRequest receive =
        Within(0, v1::COLLECTIVE_RECV, memory, output_at, 16, output_at, 16, 2);
    return job_.Ready(negotiation::MessageName(0, 0, 0, 0), {0, 0}, {send, receive});
  };
  EXPECT_TRUE(GpuExecutor::Check(self_send(16)).ok());
  EXPECT_TRUE(GpuExecutor::Check(self_send(0)).ok());  // the same bytes: nothing moves
  const absl::Status overlapping = GpuExecutor::Check(self_send(8));
  EXPECT_EQ(overlapping.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(overlapping.message(),
              HasSubstr("rank 0 receives into 16 bytes at offset 8 of allocation 1, which partly "
                        "overlaps what it sends"));
}

}  // namespace
}  // namespace collective::daemon::gpu
