// Collectives across nodes without MPI: every node's part of a batch is
// planned by its op (PlanAcrossNodes) and run by a CrossNodeRun on its own
// thread pool, the nodes' transfers meeting in an in-process fabric
// (fake_node_transport.h). The results are checked against what every rank
// of the set submitted; transport failures and abandoned runs are checked
// too.
#include "daemon/exec/cross_node_run.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "daemon/exec/adasum_kernel.h"
#include "daemon/exec/executor.h"
#include "daemon/exec/fusion.h"
#include "daemon/exec/ops/collective_op.h"
#include "daemon/exec/ops/ops.h"
#include "daemon/exec/ops/work_list.h"
#include "daemon/exec/thread_pool.h"
#include "tests/unit/exec/fake_node_transport.h"
#include "tests/unit/exec/test_clients.h"

namespace collective::daemon::exec {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kArenaBytes = 512 << 10;
constexpr uint64_t kInputOffset = 64;

// One node of the fake job: its ranks' clients, its thread pool, its
// transport, and the result block its part of a batch is written to.
struct Node {
  int32_t index = 0;
  std::vector<std::unique_ptr<job::ClientRecord>> clients;  // by local rank
  std::unique_ptr<NodeTransport> transport;
  std::unique_ptr<ThreadPool> pool = std::make_unique<ThreadPool>(1);
  std::vector<std::byte> results;
  std::vector<uint64_t> slots;
  FusedBatch batch;
  std::unique_ptr<CrossNodeRun> run;
};

class CrossNodeRunTest : public ::testing::Test {
 protected:
  CrossNodeRunTest() : zeros_(ops::kPieceBytes) {}

  // Nodes holding `local_sizes[i]` ranks each; global (and set) ranks are
  // numbered node by node. One set spans them all.
  // Forms a new world (after the previous one, if any, is dropped).
  void Form(const std::vector<int32_t>& local_sizes) {
    nodes_.clear();
    first_.clear();
    offsets_.clear();
    group_ = fabric_.NewGroup(static_cast<int32_t>(local_sizes.size()));
    int32_t rank = 0;
    for (size_t n = 0; n < local_sizes.size(); ++n) {
      Node& node = nodes_.emplace_back();
      node.index = static_cast<int32_t>(n);
      node.transport = fabric_.TransportOf(node.index);
      first_.push_back(rank);
      for (int32_t local = 0; local < local_sizes[n]; ++local, ++rank) {
        node.clients.push_back(NewTestClient(rank, kArenaBytes));
        ASSERT_NE(node.clients.back(), nullptr);
      }
    }
    set_size_ = rank;
    local_sizes_ = local_sizes;
  }

  std::shared_ptr<const job::SetSpan> SpanOf(int32_t node) const {
    auto span = std::make_shared<job::SetSpan>();
    span->group = group_;
    span->index = node;
    for (size_t n = 0; n < local_sizes_.size(); ++n) {
      span->nodes.push_back(static_cast<int32_t>(n));
      span->first.push_back(first_[n]);
      span->count.push_back(local_sizes_[n]);
    }
    return span;
  }

  // Adds to every node's batch the tensor `name`, whose set rank r submits
  // `values(r)` (float32, `rows` x `columns` with rows(r)), edited by `edit`.
  void AddTensor(const std::string& name, v1::Collective collective,
                 const std::function<int64_t(int32_t)>& rows, int64_t columns,
                 const std::function<float(int32_t, int64_t)>& value,
                 const std::function<void(v1::TensorRequest&)>& edit = {}) {
    auto everyone = std::make_shared<std::vector<v1::RankRequest>>();
    std::vector<std::vector<v1::TensorRequest>> requests(nodes_.size());
    for (Node& node : nodes_) {
      for (size_t local = 0; local < node.clients.size(); ++local) {
        const int32_t set_rank = first_[node.index] + static_cast<int32_t>(local);
        const int64_t count = rows(set_rank) * columns;
        std::vector<float> data(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) data[i] = value(set_rank, i);
        const uint64_t offset = kInputOffset + offsets_[set_rank];
        if (!data.empty()) {  // an empty vector's data() may be null
          std::memcpy(node.clients[local]->segment->arena() + offset, data.data(),
                      data.size() * sizeof(float));
        }
        offsets_[set_rank] += shm::RoundUp(data.size() * sizeof(float), 64);
        v1::TensorRequest request;
        request.set_request_id(static_cast<uint64_t>(set_rank) + 1);
        request.set_name(name);
        request.set_collective(collective);
        request.set_op(v1::REDUCE_OP_SUM);
        request.set_dtype(v1::DATA_TYPE_FLOAT32);
        request.add_shape(rows(set_rank));
        request.add_shape(columns);
        request.set_offset(offset);
        request.set_length(data.size() * sizeof(float));
        if (edit) edit(request);
        v1::RankRequest& everyone_rank = everyone->emplace_back();
        everyone_rank.set_set_rank(set_rank);
        everyone_rank.set_rank(set_rank);
        *everyone_rank.mutable_request() = request;
        requests[node.index].push_back(request);
      }
    }
    for (Node& node : nodes_) {
      negotiation::ReadyTensor tensor;
      tensor.name = name;
      tensor.set_size = set_size_;
      tensor.across_nodes = true;
      tensor.local_members = local_sizes_[node.index];
      tensor.everyone = everyone;
      tensor.span = SpanOf(node.index);
      for (size_t local = 0; local < node.clients.size(); ++local) {
        negotiation::Submission& submission = tensor.submissions.emplace_back();
        submission.client = node.clients[local].get();
        submission.rank = first_[node.index] + static_cast<int32_t>(local);
        submission.set_rank = submission.rank;
        submission.request = requests[node.index][local];
      }
      node.batch.bytes += SlotBytes(tensor);
      node.batch.tensors.push_back(std::move(tensor));
    }
  }

  // Plans every node's batch and runs them all to the end (or the
  // deadline), advancing the nodes in turn as their engines would.
  void RunAll(uint64_t chunk_bytes) {
    for (Node& node : nodes_) {
      uint64_t at = 0;
      for (const negotiation::ReadyTensor& tensor : node.batch.tensors) {
        node.slots.push_back(at);
        at += SlotBytes(tensor);
      }
      node.results.assign(at, std::byte{0xab});
      std::vector<CrossNodeStage> stages;
      const ops::PlanContext context{
          .data = node.results.data(), .zeros = zeros_.data(), .chunk_bytes = chunk_bytes};
      ops::OpFor(node.batch.tensors.front().request())
          ->PlanAcrossNodes(node.batch, node.slots, context, stages);
      stages_ = stages.size();
      node.run = std::make_unique<CrossNodeRun>(std::move(stages), *node.transport, *node.pool,
                                                [this] { wakes_.fetch_add(1); });
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::vector<bool> done(nodes_.size(), false);
    while (std::count(done.begin(), done.end(), true) < static_cast<ptrdiff_t>(nodes_.size())) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the nodes' runs never finished";
      for (size_t n = 0; n < nodes_.size(); ++n) {
        if (!done[n]) done[n] = nodes_[n].run->Advance();
      }
    }
  }

  // Node `n`'s result of tensor `t` for its local rank `local`, as floats.
  std::vector<float> ResultOf(size_t n, size_t t, size_t local) const {
    const Node& node = nodes_[n];
    const negotiation::ReadyTensor& tensor = node.batch.tensors[t];
    const ops::RankResult result = ops::OpFor(tensor.request())->ResultOf(tensor, local);
    std::vector<float> values(result.bytes / sizeof(float));
    if (result.bytes > 0) {  // a rank's empty result: values.data() may be null
      std::memcpy(values.data(), node.results.data() + node.slots[t] + result.offset, result.bytes);
    }
    return values;
  }

  // What local rank `local` of node `n` receives of tensor `t`: from the
  // output its request names in its arena where the op says the result went
  // there (RankResult.in_output), else from the slot.
  std::vector<float> Received(size_t n, size_t t, size_t local) const {
    const negotiation::ReadyTensor& tensor = nodes_[n].batch.tensors[t];
    const ops::RankResult result = ops::OpFor(tensor.request())->ResultOf(tensor, local);
    if (!result.in_output) return ResultOf(n, t, local);
    return OutputOf(n, local, tensor.submissions[local].request, result.bytes / sizeof(float));
  }

  // `floats` floats of the output that `request` of local rank `local` of
  // node `n` names.
  std::vector<float> OutputOf(size_t n, size_t local, const v1::TensorRequest& request,
                              size_t floats) const {
    std::vector<float> values(floats);
    std::memcpy(values.data(), nodes_[n].clients[local]->segment->arena() + request.output_offset(),
                floats * sizeof(float));
    return values;
  }

  FakeFabric fabric_;
  std::shared_ptr<const job::NodeGroup> group_;
  std::vector<Node> nodes_;
  std::vector<int32_t> first_;
  std::vector<int32_t> local_sizes_;
  int32_t set_size_ = 0;
  std::map<int32_t, uint64_t> offsets_;
  std::vector<std::byte> zeros_;
  size_t stages_ = 0;
  // How often a worker woke the engine: local work it ran finished.
  std::atomic<int> wakes_{0};
};

// The set rank of a request AddTensor made (its request id is set rank + 1).
int32_t SetRankOf(const v1::TensorRequest& request) {
  return static_cast<int32_t>(request.request_id()) - 1;
}

TEST_F(CrossNodeRunTest, FusedAverageIsPipelinedInChunksAndAgreesOnEveryNode) {
  Form({2, 1, 2});
  const auto average = [](v1::TensorRequest& request) { request.set_op(v1::REDUCE_OP_AVERAGE); };
  AddTensor(
      "a", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return 25; }, 40,
      [](int32_t rank, int64_t i) { return static_cast<float>(rank * 1000 + i); }, average);
  AddTensor(
      "b", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return 37; }, 1,
      [](int32_t rank, int64_t i) { return static_cast<float>(rank - i); }, average);
  RunAll(/*chunk_bytes=*/256);
  EXPECT_GT(stages_, 10u) << "a chunk of 256 bytes cuts the batch into many stages";
  EXPECT_EQ(fabric_.completed(), static_cast<int>(stages_)) << "one transfer per stage";
  for (size_t n = 0; n < nodes_.size(); ++n) {
    ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
    for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
      const std::vector<float> a = ResultOf(n, 0, local);
      ASSERT_EQ(a.size(), 1000u);
      for (int64_t i = 0; i < 1000; ++i) {
        // Ranks 0..4: the average of rank * 1000 + i is 2000 + i.
        ASSERT_FLOAT_EQ(a[i], static_cast<float>(2000 + i)) << "node " << n << " element " << i;
      }
      const std::vector<float> b = ResultOf(n, 1, local);
      ASSERT_EQ(b.size(), 37u);
      for (int64_t i = 0; i < 37; ++i) ASSERT_FLOAT_EQ(b[i], static_cast<float>(2 - i));
    }
  }
  EXPECT_EQ(fabric_.abandoned(), 0);
}

// A rank that names an output in its arena gets its result there on every
// node, chunk by chunk once the nodes' combination is in; the others read
// the slot. In place here for the even set ranks: their input is not
// overwritten before every chunk reading it was reduced.
TEST_F(CrossNodeRunTest, AnAllreducesResultReachesTheOutputsTheRanksNameOnEveryNode) {
  Form({2, 1, 2});
  AddTensor(
      "a", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return 25; }, 40,
      [](int32_t rank, int64_t i) { return static_cast<float>(rank * 1000 + i); },
      [](v1::TensorRequest& request) {
        request.set_op(v1::REDUCE_OP_AVERAGE);
        if (SetRankOf(request) % 2 == 0) request.set_output_offset(request.offset());
      });
  RunAll(/*chunk_bytes=*/256);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
    const negotiation::ReadyTensor& tensor = nodes_[n].batch.tensors.front();
    for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
      EXPECT_EQ(ops::AllreduceOp().ResultOf(tensor, local).in_output,
                tensor.submissions[local].request.has_output_offset());
      const std::vector<float> got = Received(n, 0, local);
      ASSERT_EQ(got.size(), 1000u);
      for (int64_t i = 0; i < 1000; ++i) {
        ASSERT_FLOAT_EQ(got[i], static_cast<float>(2000 + i))
            << "node " << n << " local rank " << local << " element " << i;
      }
    }
  }
}

// A small batch's local part runs on the engine thread, at once: a worker's
// wake-up and then the engine's would cost more than the work (the latency
// of a small allreduce across nodes).
TEST_F(CrossNodeRunTest, ASmallBatchsLocalPartRunsOnTheEngineThread) {
  Form({2, 1});
  for (Node& node : nodes_) node.pool = std::make_unique<ThreadPool>(2);
  AddTensor(
      "small", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return 1; }, 1,
      [](int32_t rank, int64_t) { return static_cast<float>(rank + 1); });
  RunAll(/*chunk_bytes=*/1 << 20);
  EXPECT_EQ(wakes_.load(), 0) << "no worker ran the local part of 4 bytes";
  for (size_t n = 0; n < nodes_.size(); ++n) {
    ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
    for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
      EXPECT_THAT(ResultOf(n, 0, local), ::testing::ElementsAre(6.0f));
    }
  }
}

// A small cached allreduce that node 0 combined as it decided (each node's
// part came with its announcement): every node takes the combination, scales
// it and transfers nothing, and every rank gets the bits the transfers give
// (the fabric, like node 0, combines the nodes in node order).
TEST_F(CrossNodeRunTest, ASmallAllreduceCombinedByNodeZeroEqualsTheTransferredOneBitwise) {
  struct Variant {
    v1::ReduceOp op;
    double prescale;
    double postscale;
  };
  for (const std::vector<int32_t>& local_sizes :
       {std::vector<int32_t>{2, 1}, std::vector<int32_t>{1, 3, 2}}) {
    for (const Variant variant :
         {Variant{v1::REDUCE_OP_SUM, 1, 1}, Variant{v1::REDUCE_OP_AVERAGE, 0.5, 3},
          Variant{v1::REDUCE_OP_MIN, 1, 1}, Variant{v1::REDUCE_OP_MAX, 2, 1},
          Variant{v1::REDUCE_OP_PRODUCT, 1, 0.25}}) {
      SCOPED_TRACE(absl::StrCat(local_sizes.size(), " nodes, op ", variant.op));
      const auto edit = [variant](v1::TensorRequest& request) {
        request.set_op(variant.op);
        if (variant.prescale != 1) request.set_prescale(variant.prescale);
        if (variant.postscale != 1) request.set_postscale(variant.postscale);
      };
      const auto value = [](int32_t rank, int64_t i) {
        return static_cast<float>((rank + 1) * 1.37 + i * 0.11) - 2.5f;
      };
      std::vector<std::vector<std::vector<float>>> transferred;  // [node][local]
      Form(local_sizes);
      AddTensor(
          "w", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return 3; }, 5, value, edit);
      RunAll(/*chunk_bytes=*/1 << 20);
      for (size_t n = 0; n < nodes_.size(); ++n) {
        ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
        auto& node = transferred.emplace_back();
        for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
          node.push_back(ResultOf(n, 0, local));
        }
      }

      Form(local_sizes);
      AddTensor(
          "w", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return 3; }, 5, value, edit);
      const v1::TensorRequest& request = nodes_[0].batch.tensors[0].request();
      ASSERT_TRUE(ops::CombinedByNodeZero(request, 60));
      EXPECT_FALSE(ops::CombinedByNodeZero(request, 59)) << "60 bytes: above the limit";
      std::vector<std::string> parts;
      for (Node& node : nodes_)
        parts.push_back(ops::NodePart(node.batch.tensors[0], zeros_.data()));
      std::vector<const std::string*> in_node_order;
      for (const std::string& part : parts) in_node_order.push_back(&part);
      std::optional<std::string> combined =
          ops::CombineNodeParts(*nodes_[0].batch.tensors[0].everyone, in_node_order);
      ASSERT_TRUE(combined.has_value());
      const auto shared = std::make_shared<const std::string>(*combined);
      for (Node& node : nodes_) node.batch.tensors[0].combined = shared;
      const int before = fabric_.completed();
      RunAll(/*chunk_bytes=*/1 << 20);
      EXPECT_EQ(fabric_.completed(), before) << "nothing transferred after the decision";
      for (size_t n = 0; n < nodes_.size(); ++n) {
        ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
        for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
          EXPECT_EQ(ResultOf(n, 0, local), transferred[n][local]) << "node " << n;
        }
      }
    }
  }
}

// Node 0 leaves to the nodes what it cannot combine: a part of the wrong
// size (a malformed message), or a tensor that does not qualify.
TEST_F(CrossNodeRunTest, NodeZeroCombinesOnlyWholePartsOfQualifyingTensors) {
  v1::RankRequest rank;
  v1::TensorRequest& request = *rank.mutable_request();
  request.set_collective(v1::COLLECTIVE_ALLREDUCE);
  request.set_dtype(v1::DATA_TYPE_FLOAT32);
  request.set_op(v1::REDUCE_OP_SUM);
  request.set_length(8);
  const std::vector<v1::RankRequest> everyone = {rank};
  const std::string whole(8, '\0');
  const std::string short_part(4, '\0');
  EXPECT_TRUE(ops::CombineNodeParts(everyone, {&whole, &whole}).has_value());
  EXPECT_EQ(ops::CombineNodeParts(everyone, {&whole, &short_part}), std::nullopt);
  EXPECT_EQ(ops::CombineNodeParts(everyone, {}), std::nullopt);
  request.set_op(v1::REDUCE_OP_ADASUM);
  EXPECT_FALSE(ops::CombinedByNodeZero(request, 1024)) << "Adasum is not element by element";
  EXPECT_EQ(ops::CombineNodeParts({rank}, {&whole, &whole}), std::nullopt);
  request.set_op(v1::REDUCE_OP_SUM);
  request.set_memory(v1::MEMORY_KIND_CUDA);
  EXPECT_FALSE(ops::CombinedByNodeZero(request, 1024)) << "GPU tensors go through NCCL";
  request.set_memory(v1::MEMORY_KIND_HOST);
  request.set_collective(v1::COLLECTIVE_BROADCAST);
  EXPECT_FALSE(ops::CombinedByNodeZero(request, 1024));
}

// A large one's goes to the workers, which wake the engine when it is done.
TEST_F(CrossNodeRunTest, ALargeBatchsLocalPartRunsOnTheWorkers) {
  Form({1, 1});
  for (Node& node : nodes_) node.pool = std::make_unique<ThreadPool>(2);
  constexpr int64_t kLarge = (ThreadPool::kInlineBytes / sizeof(float)) + 1024;
  AddTensor(
      "large", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return kLarge; }, 1,
      [](int32_t rank, int64_t i) { return static_cast<float>(rank + i % 7); });
  RunAll(/*chunk_bytes=*/64 << 20);
  EXPECT_EQ(wakes_.load(), 2) << "each node's workers ran its local part, in one stage";
  for (size_t n = 0; n < nodes_.size(); ++n) {
    ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
    const std::vector<float> result = ResultOf(n, 0, 0);
    ASSERT_EQ(result.size(), static_cast<size_t>(kLarge));
    for (int64_t i = 0; i < kLarge; ++i) {
      ASSERT_FLOAT_EQ(result[i], static_cast<float>(1 + 2 * (i % 7))) << "element " << i;
    }
  }
}

// Adasum across nodes is the tree one node would build over every rank:
// each node's ranks first, then the nodes' partial results in node order —
// the same operations, so the same bits. The even set ranks take tensor
// 'a' in place (their output is their input), on every node.
TEST_F(CrossNodeRunTest, AdasumAcrossNodesEqualsTheTreeOverEveryRank) {
  for (const std::vector<int32_t>& local_sizes :
       {std::vector<int32_t>{2, 2}, std::vector<int32_t>{1, 1, 1, 1},
        std::vector<int32_t>{2, 2, 2, 2}}) {
    SCOPED_TRACE(local_sizes.size());
    Form(local_sizes);
    const auto adasum = [](v1::TensorRequest& request) {
      request.set_op(v1::REDUCE_OP_ADASUM);
      request.set_postscale(0.5);
    };
    const auto value = [](int32_t tensor) {
      return [tensor](int32_t rank, int64_t i) {
        return static_cast<float>(((rank + 1) * (i + tensor + 3) * 7919) % 23) - 11.0f;
      };
    };
    AddTensor(
        "a", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return 9; }, 7, value(0),
        [&](v1::TensorRequest& request) {
          adasum(request);
          if (SetRankOf(request) % 2 == 0) request.set_output_offset(request.offset());
        });
    AddTensor(
        "b", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return 1; }, 5, value(1), adasum);
    RunAll(/*chunk_bytes=*/256);
    EXPECT_EQ(stages_, 2u) << "one stage per tensor: its coefficients need all of it";
    for (size_t t = 0; t < 2; ++t) {
      const int64_t count = t == 0 ? 63 : 5;
      std::vector<std::vector<float>> inputs(static_cast<size_t>(set_size_));
      std::vector<const void*> pointers;
      for (int32_t rank = 0; rank < set_size_; ++rank) {
        for (int64_t i = 0; i < count; ++i) inputs[rank].push_back(value(t)(rank, i));
        pointers.push_back(inputs[rank].data());
      }
      std::vector<float> expected(static_cast<size_t>(count));
      Adasum(v1::DATA_TYPE_FLOAT32, pointers, expected.data(), expected.size(), 1.0, 0.5);
      for (size_t n = 0; n < nodes_.size(); ++n) {
        ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
        const negotiation::ReadyTensor& tensor = nodes_[n].batch.tensors[t];
        for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
          EXPECT_EQ(ops::AllreduceOp().ResultOf(tensor, local).in_output,
                    tensor.submissions[local].request.has_output_offset());
          EXPECT_EQ(Received(n, t, local), expected) << "node " << n << " tensor " << t;
        }
      }
    }
  }
}

// Horovod's NCCL build for GPU tensors: each node sums its ranks, the nodes'
// sums are combined by Adasum in node order, and the result is scaled by
// postscale / ranks per node.
TEST_F(CrossNodeRunTest, AdasumOverNodesCombinesTheNodesSums) {
  for (const std::vector<int32_t>& local_sizes :
       {std::vector<int32_t>{3, 3}, std::vector<int32_t>{1, 1, 1, 1},
        std::vector<int32_t>{2, 2, 2, 2}}) {
    SCOPED_TRACE(local_sizes.size());
    Form(local_sizes);
    const auto adasum = [](v1::TensorRequest& request) {
      request.set_op(v1::REDUCE_OP_ADASUM);
      request.set_adasum_scope(v1::ADASUM_SCOPE_NODES);
      request.set_postscale(0.5);
    };
    const auto value = [](int32_t rank, int64_t i) {
      return static_cast<float>(((rank + 1) * (i + 3) * 7919) % 23) - 11.0f;
    };
    AddTensor(
        "a", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return 9; }, 7, value, adasum);
    RunAll(/*chunk_bytes=*/256);
    const int64_t count = 63;
    const int32_t per_node = local_sizes.front();
    std::vector<std::vector<float>> sums(local_sizes.size(), std::vector<float>(count));
    std::vector<const void*> pointers;
    for (size_t node = 0; node < local_sizes.size(); ++node) {
      for (int64_t i = 0; i < count; ++i) {
        const auto first = static_cast<int32_t>(node) * per_node;
        float sum = value(first, i);
        for (int32_t rank = first + 1; rank < first + per_node; ++rank) sum += value(rank, i);
        sums[node][i] = sum;
      }
      pointers.push_back(sums[node].data());
    }
    std::vector<float> expected(static_cast<size_t>(count));
    Adasum(v1::DATA_TYPE_FLOAT32, pointers, expected.data(), expected.size(), 1.0, 0.5 / per_node);
    for (size_t n = 0; n < nodes_.size(); ++n) {
      ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
      for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
        EXPECT_EQ(ResultOf(n, 0, local), expected) << "node " << n;
      }
    }
  }
}

TEST_F(CrossNodeRunTest, BroadcastReachesEveryNodeFromTheRootsNode) {
  Form({1, 2, 2});
  AddTensor(
      "w", v1::COLLECTIVE_BROADCAST, [](int32_t) { return 3; }, 5,
      [](int32_t rank, int64_t i) { return static_cast<float>(rank * 100 + i); },
      [](v1::TensorRequest& request) { request.set_root_rank(2); });
  RunAll(/*chunk_bytes=*/1 << 20);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
    for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
      const std::vector<float> w = ResultOf(n, 0, local);
      ASSERT_EQ(w.size(), 15u);
      for (int64_t i = 0; i < 15; ++i) ASSERT_FLOAT_EQ(w[i], static_cast<float>(200 + i));
    }
  }
}

// Where a rank's request names an output in its arena, the result goes
// there, on every node, once it has arrived (here: in place for even set
// ranks, elsewhere in the arena for odd ones).
constexpr uint64_t kOutputApart = 256 << 10;

void NameOutputs(v1::TensorRequest& request) {
  request.set_output_offset(SetRankOf(request) % 2 == 0 ? request.offset() : kOutputApart);
}

TEST_F(CrossNodeRunTest, ABroadcastReachesTheOutputsTheRanksNameOnEveryNode) {
  Form({1, 2, 2});
  AddTensor(
      "w", v1::COLLECTIVE_BROADCAST, [](int32_t) { return 3; }, 5,
      [](int32_t rank, int64_t i) { return static_cast<float>(rank * 100 + i); },
      [](v1::TensorRequest& request) {
        request.set_root_rank(2);
        if (request.request_id() != 2) NameOutputs(request);  // set rank 1 reads the slot
      });
  RunAll(/*chunk_bytes=*/1 << 20);
  std::vector<float> expected(15);
  std::iota(expected.begin(), expected.end(), 200.0f);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
    const negotiation::ReadyTensor& tensor = nodes_[n].batch.tensors.front();
    for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
      EXPECT_EQ(ops::BroadcastOp().ResultOf(tensor, local).in_output,
                tensor.submissions[local].request.has_output_offset());
      EXPECT_EQ(Received(n, 0, local), expected) << "node " << n << " local rank " << local;
    }
  }
}

TEST_F(CrossNodeRunTest, AReducescattersBlocksReachTheOutputsTheRanksNameOnEveryNode) {
  Form({2, 1, 2});
  // 11 rows of 3 among 5 ranks: 3, 2, 2, 2, 2 rows; averaged and doubled.
  AddTensor(
      "rs", v1::COLLECTIVE_REDUCESCATTER, [](int32_t) { return 11; }, 3,
      [](int32_t rank, int64_t i) { return static_cast<float>(rank * 1000 + i); },
      [](v1::TensorRequest& request) {
        request.set_op(v1::REDUCE_OP_AVERAGE);
        request.set_postscale(2);
        // Set rank 3 reads the slot; the others' blocks lie apart from their inputs.
        if (SetRankOf(request) != 3) {
          request.set_output_offset(kOutputApart + 64 * SetRankOf(request));
        }
      });
  RunAll(/*chunk_bytes=*/1 << 20);
  static constexpr int64_t kFirstRow[] = {0, 3, 5, 7, 9, 11};
  for (size_t n = 0; n < nodes_.size(); ++n) {
    ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
    const negotiation::ReadyTensor& tensor = nodes_[n].batch.tensors.front();
    for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
      const int32_t rank = first_[n] + static_cast<int32_t>(local);
      std::vector<float> expected;
      for (int64_t i = kFirstRow[rank] * 3; i < kFirstRow[rank + 1] * 3; ++i) {
        expected.push_back(static_cast<float>(2 * (2000 + i)));  // ranks 0..4 average 2000 + i
      }
      EXPECT_EQ(ops::ReducescatterOp().ResultOf(tensor, local).in_output,
                tensor.submissions[local].request.has_output_offset());
      EXPECT_EQ(Received(n, 0, local), expected) << "rank " << rank;
    }
  }
}

TEST_F(CrossNodeRunTest, AllgatherConcatenatesUnevenRowsInSetRankOrder) {
  Form({2, 1});
  const auto rows = [](int32_t rank) { return int64_t{rank + 1}; };
  AddTensor("g", v1::COLLECTIVE_ALLGATHER, rows, 2,
            [](int32_t rank, int64_t i) { return static_cast<float>(rank * 10 + i); });
  RunAll(/*chunk_bytes=*/1 << 20);
  std::vector<float> expected;
  for (int32_t rank = 0; rank < 3; ++rank) {
    for (int64_t i = 0; i < rows(rank) * 2; ++i) expected.push_back(rank * 10.0f + i);
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
    for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
      EXPECT_EQ(ResultOf(n, 0, local), expected) << "node " << n;
    }
  }
}

TEST_F(CrossNodeRunTest, ATransportFailureReachesEveryNodeNamingTheTensor) {
  Form({1, 1});
  AddTensor(
      "lost", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return 4; }, 1,
      [](int32_t, int64_t) { return 1.0f; });
  fabric_.FailNext(absl::UnavailableError("the link to the other node is down"));
  RunAll(/*chunk_bytes=*/1 << 20);
  for (const Node& node : nodes_) {
    EXPECT_EQ(node.run->status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(node.run->status().message(),
                HasSubstr("'lost' across nodes: the link to the other node is down"));
  }
}

TEST_F(CrossNodeRunTest, ARunThatEndsUnfinishedAbandonsItsTransfers) {
  Form({1, 1});
  AddTensor(
      "half", v1::COLLECTIVE_ALLREDUCE, [](int32_t) { return 4; }, 1,
      [](int32_t, int64_t) { return 1.0f; });
  Node& alone = nodes_[0];
  alone.slots = {0};
  alone.results.assign(SlotBytes(alone.batch.tensors[0]), std::byte{0});
  std::vector<CrossNodeStage> stages;
  const ops::PlanContext context{.data = alone.results.data(), .zeros = zeros_.data()};
  ops::AllreduceOp().PlanAcrossNodes(alone.batch, alone.slots, context, stages);
  alone.run =
      std::make_unique<CrossNodeRun>(std::move(stages), *alone.transport, *alone.pool, [] {});
  // The other node never starts: this one's transfer waits for it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!alone.run->waiting_for_transfers()) {
    ASSERT_FALSE(alone.run->Advance()) << alone.run->status();
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
  }
  EXPECT_FALSE(alone.run->Advance());
  alone.run.reset();
  EXPECT_EQ(fabric_.abandoned(), 1);
  EXPECT_EQ(fabric_.completed(), 0);
}

// --- Reduce, gather, scatter: the root's node reads the result ---------------

TEST_F(CrossNodeRunTest, ReduceReachesTheRootOnItsNodeOnly) {
  Form({2, 1, 2});
  AddTensor(
      "r", v1::COLLECTIVE_REDUCE, [](int32_t) { return 4; }, 3,
      [](int32_t rank, int64_t i) { return static_cast<float>(rank * 10 + i); },
      [](v1::TensorRequest& request) {
        request.set_root_rank(2);
        request.set_op(v1::REDUCE_OP_AVERAGE);
        request.set_postscale(2);
      });
  RunAll(/*chunk_bytes=*/16);
  // The slot in chunks of 16 bytes: each a reduction into the root's node,
  // which the others only send to (no allreduce).
  const std::vector<std::string> kinds = fabric_.TakeKinds();
  EXPECT_GE(kinds.size(), 3u);
  EXPECT_THAT(kinds, ::testing::Each(std::string("reduce")));
  for (size_t n = 0; n < nodes_.size(); ++n) {
    ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
    for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
      const std::vector<float> r = ResultOf(n, 0, local);
      if (first_[n] + static_cast<int32_t>(local) != 2) {
        EXPECT_TRUE(r.empty()) << "node " << n << " local rank " << local;
        continue;
      }
      ASSERT_EQ(r.size(), 12u);
      // Ranks 0..4 average to 20 + i, doubled.
      for (int64_t i = 0; i < 12; ++i) ASSERT_FLOAT_EQ(r[i], static_cast<float>(2 * (20 + i)));
    }
  }
}

// The root's output gets each chunk once it is combined and scaled on the
// root's node; no other node writes any output (a partial result there).
TEST_F(CrossNodeRunTest, AReduceReachesTheRootsOutputOnItsNode) {
  Form({2, 1, 2});
  AddTensor(
      "r", v1::COLLECTIVE_REDUCE, [](int32_t) { return 4; }, 3,
      [](int32_t rank, int64_t i) { return static_cast<float>(rank * 10 + i); },
      [](v1::TensorRequest& request) {
        request.set_root_rank(3);
        request.set_op(v1::REDUCE_OP_AVERAGE);
        NameOutputs(request);  // the root, set rank 3, elsewhere in its arena
      });
  for (Node& node : nodes_) {
    for (auto& client : node.clients) std::memset(client->segment->arena() + kOutputApart, 0, 48);
  }
  RunAll(/*chunk_bytes=*/16);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
    const negotiation::ReadyTensor& tensor = nodes_[n].batch.tensors.front();
    for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
      const int32_t rank = first_[n] + static_cast<int32_t>(local);
      const v1::TensorRequest& request = tensor.submissions[local].request;
      EXPECT_EQ(ops::ReduceOp().ResultOf(tensor, local).in_output, rank == 3) << "rank " << rank;
      const std::vector<float> got = OutputOf(n, local, request, 12);
      for (int64_t i = 0; i < 12; ++i) {
        // Ranks 0..4 average to 20 + i at the root. An even rank's output
        // is its input, which it keeps; an odd one's stays zero.
        const float want = rank == 3       ? static_cast<float>(20 + i)
                           : rank % 2 == 0 ? static_cast<float>(rank * 10 + i)
                                           : 0.0f;
        ASSERT_FLOAT_EQ(got[i], want) << "rank " << rank << " element " << i;
      }
    }
  }
}

TEST_F(CrossNodeRunTest, GatherCollectsUnevenRowsAtTheRoot) {
  Form({1, 2});
  const auto rows = [](int32_t rank) { return int64_t{2 - rank}; };  // 2, 1, 0
  AddTensor(
      "g", v1::COLLECTIVE_GATHER, rows, 2,
      [](int32_t rank, int64_t i) { return static_cast<float>(rank * 10 + i); },
      [](v1::TensorRequest& request) { request.set_root_rank(1); });
  RunAll(/*chunk_bytes=*/1 << 20);
  EXPECT_EQ(fabric_.TakeKinds(), std::vector<std::string>{"gather"});
  ASSERT_TRUE(nodes_[1].run->status().ok()) << nodes_[1].run->status();
  EXPECT_EQ(ResultOf(1, 0, 0), (std::vector<float>{0, 1, 2, 3, 10, 11}));
  EXPECT_TRUE(ResultOf(0, 0, 0).empty());
  EXPECT_TRUE(ResultOf(1, 0, 1).empty());
}

TEST_F(CrossNodeRunTest, ScatterDeliversEveryNodesRowsFromTheRootsNode) {
  Form({2, 1, 2});
  // Root 3 (on node 2) holds 1 + 0 + 2 + 3 + 1 = 7 rows; rank r receives
  // receive[r].
  static constexpr int64_t kReceive[] = {1, 0, 2, 3, 1};
  // Ranks 0 and 2 take their rows into outputs apart from their inputs from
  // the slot, root 3 from its own input; ranks 1 and 4 read the slot.
  static constexpr bool kNamesOutput[] = {true, false, true, true, false};
  AddTensor(
      "s", v1::COLLECTIVE_SCATTER, [](int32_t rank) { return rank == 3 ? int64_t{7} : 0; }, 2,
      [](int32_t, int64_t i) { return static_cast<float>(i); },
      [](v1::TensorRequest& request) {
        request.set_root_rank(3);
        request.set_receive_rows(kReceive[SetRankOf(request)]);
        if (kNamesOutput[SetRankOf(request)]) request.set_output_offset(kOutputApart);
      });
  RunAll(/*chunk_bytes=*/1 << 20);
  int64_t row = 0;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    ASSERT_TRUE(nodes_[n].run->status().ok()) << nodes_[n].run->status();
    for (size_t local = 0; local < nodes_[n].clients.size(); ++local) {
      const int32_t rank = first_[n] + static_cast<int32_t>(local);
      std::vector<float> expected;
      for (int64_t i = 0; i < kReceive[rank] * 2; ++i) expected.push_back(row * 2.0f + i);
      row += kReceive[rank];
      EXPECT_EQ(ops::ScatterOp().ResultOf(nodes_[n].batch.tensors.front(), local).in_output,
                kNamesOutput[rank]);
      EXPECT_EQ(Received(n, 0, local), expected) << "rank " << rank;
    }
  }
}

}  // namespace
}  // namespace collective::daemon::exec
