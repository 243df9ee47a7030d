// GlooTransport among 2 and 3 "nodes" of this process, each with its own
// transport over real Gloo contexts on 127.0.0.1 (local_contexts.h). The
// test thread starts every node's transfers and tests them until a
// deadline: Start* never blocks, so one thread drives all nodes.
#include "daemon/gloo/gloo_transport.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/half.h"
#include "daemon/exec/reduce_kernels.h"
#include "tests/common/reference_reduce.h"
#include "tests/unit/gloo/local_contexts.h"

namespace collective::daemon::gloo {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<std::byte>;

// The nodes of the job, by place: not 0, 1, 2, so that an error naming a
// node shows it looked the node up.
const std::vector<int32_t> kNodes = {3, 5, 8};

constexpr std::array<v1::ReduceOp, 4> kOps = {v1::REDUCE_OP_SUM, v1::REDUCE_OP_MIN,
                                              v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT};

std::vector<v1::DataType> AllTypes() {
  std::vector<v1::DataType> types;
  for (int type = v1::DATA_TYPE_UINT8; type <= v1::DATA_TYPE_BOOL; ++type) {
    types.push_back(static_cast<v1::DataType>(type));
  }
  return types;
}

// A job's world: a context, a span and a transport per node.
struct World {
  explicit World(int size, std::chrono::milliseconds timeout = 20s) {
    contexts = testing::ConnectLocalContexts(size, timeout);
    const std::vector<int32_t> nodes(kNodes.begin(), kNodes.begin() + size);
    for (int rank = 0; rank < size; ++rank) {
      spans.push_back(testing::SpanOf(contexts[static_cast<size_t>(rank)], nodes));
      transports.push_back(std::make_unique<GlooTransport>(
          GlooTransportOptions{.timeout = timeout, .wake = [this] { ++wakes; }}));
    }
  }
  int size() const { return static_cast<int>(transports.size()); }

  std::vector<std::shared_ptr<::gloo::Context>> contexts;
  std::vector<job::SetSpan> spans;
  std::vector<std::unique_ptr<GlooTransport>> transports;
  std::atomic<int> wakes{0};  // transfers finished, as the workers told
};

// Tests every transfer until all completed (OK), one failed (its error),
// or the deadline passed.
absl::Status WaitAll(std::vector<exec::Pending>& pending, Clock::duration within = 30s) {
  const Clock::time_point deadline = Clock::now() + within;
  for (;;) {
    bool all = true;
    for (exec::Pending& transfer : pending) {
      absl::StatusOr<bool> done = transfer->Test();
      if (!done.ok()) return done.status();
      all = all && *done;
    }
    if (all) return absl::OkStatus();
    if (Clock::now() > deadline) return absl::DeadlineExceededError("the transfers did not finish");
    std::this_thread::yield();
  }
}

// Tests one transfer until it completes or fails (its status), or the
// deadline passes.
absl::Status WaitOne(exec::PendingTransfer& transfer, Clock::duration within) {
  const Clock::time_point deadline = Clock::now() + within;
  for (;;) {
    absl::StatusOr<bool> done = transfer.Test();
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
    if (Clock::now() > deadline) return absl::DeadlineExceededError("still running");
    std::this_thread::yield();
  }
}

void Start(std::vector<exec::Pending>& pending, absl::StatusOr<exec::Pending> started) {
  ASSERT_TRUE(started.ok()) << started.status();
  pending.push_back(std::move(*started));
}

// Data whose reduction over a few nodes is exact in any order (Gloo's ring
// folds the nodes in an order of its own): the tests' data generator,
// except for products of floats, which are powers of two here.
Bytes NodeData(v1::DataType dtype, v1::ReduceOp op, int rank, size_t count) {
  Bytes data(count * ElementSize(dtype));
  const uint64_t seed = 1000 * static_cast<uint64_t>(rank) + static_cast<uint64_t>(dtype) * 10 +
                        static_cast<uint64_t>(op);
  if (op != v1::REDUCE_OP_PRODUCT || !IsFloatingPoint(dtype)) {
    collective::testing::FillTestData(dtype, op, seed, data.data(), count);
    return data;
  }
  constexpr float kValues[] = {0.5F, 1.0F, 2.0F, -1.0F, -2.0F, 4.0F};
  for (size_t i = 0; i < count; ++i) {
    const float value = kValues[(i * 7 + seed) % 6];
    switch (dtype) {
      case v1::DATA_TYPE_FLOAT16: {
        const uint16_t bits = FloatToHalf(value);
        std::memcpy(data.data() + 2 * i, &bits, 2);
        break;
      }
      case v1::DATA_TYPE_BFLOAT16: {
        const uint16_t bits = FloatToBFloat16(value);
        std::memcpy(data.data() + 2 * i, &bits, 2);
        break;
      }
      case v1::DATA_TYPE_FLOAT32:
        std::memcpy(data.data() + 4 * i, &value, 4);
        break;
      default: {
        const double wide = value;
        std::memcpy(data.data() + 8 * i, &wide, 8);
      }
    }
  }
  return data;
}

// The daemon's kernels over the nodes' data, in node order.
Bytes Reference(v1::DataType dtype, v1::ReduceOp op, const std::vector<Bytes>& data, size_t count,
                size_t first = 0) {
  const size_t element = ElementSize(dtype);
  std::vector<const void*> inputs;
  for (const Bytes& node : data) inputs.push_back(node.data() + first * element);
  Bytes out(count * element);
  if (count > 0) exec::Reduce({.dtype = dtype, .op = op}, inputs, out.data(), count);
  return out;
}

class GlooTransportTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooTransportTest, AllreduceOfEveryTypeAndOpEqualsTheKernels) {
  World world(GetParam());
  constexpr size_t kCount = 1003;
  // Every (type, op) at once: many collectives in flight on one context.
  struct Case {
    v1::DataType dtype;
    v1::ReduceOp op;
    std::vector<Bytes> data;  // by node
    Bytes expected;
  };
  std::vector<Case> cases;
  for (v1::DataType dtype : AllTypes()) {
    for (v1::ReduceOp op : kOps) {
      if (!exec::IsReducible(dtype, op)) continue;
      Case& added = cases.emplace_back(Case{.dtype = dtype, .op = op});
      for (int rank = 0; rank < world.size(); ++rank) {
        added.data.push_back(NodeData(dtype, op, rank, kCount));
      }
      added.expected = Reference(dtype, op, added.data, kCount);
    }
  }
  std::vector<exec::Pending> pending;
  for (int rank = 0; rank < world.size(); ++rank) {
    for (Case& one : cases) {
      Start(pending, world.transports[rank]->StartAllreduce(
                         world.spans[rank], one.data[rank].data(), kCount, one.dtype, one.op));
    }
  }
  ASSERT_TRUE(WaitAll(pending).ok()) << WaitAll(pending);
  // Each worker rings after it published its transfer's outcome.
  const Clock::time_point deadline = Clock::now() + 10s;
  while (world.wakes.load() < static_cast<int>(pending.size()) && Clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(world.wakes.load(), static_cast<int>(pending.size()));
  for (const Case& one : cases) {
    for (int rank = 0; rank < world.size(); ++rank) {
      EXPECT_EQ(collective::testing::CompareBitwise(one.dtype, one.expected.data(),
                                                    one.data[rank].data(), kCount),
                "")
          << DataTypeName(one.dtype) << " " << ReduceOpName(one.op) << " on node " << rank;
    }
  }
}

TEST_P(GlooTransportTest, ReductionsFoldTheNodesInRankOrderAsTheKernelsDo) {
  World world(GetParam());
  // Data whose reduction depends on the order of the nodes: products that
  // round, and NaNs of different payloads (MIN and MAX keep the left one).
  constexpr size_t kCount = 4099;
  for (v1::DataType dtype : {v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16, v1::DATA_TYPE_FLOAT32,
                             v1::DATA_TYPE_FLOAT64}) {
    for (v1::ReduceOp op : kOps) {
      std::vector<Bytes> data;
      for (int rank = 0; rank < world.size(); ++rank) {
        Bytes node(kCount * ElementSize(dtype));
        collective::testing::FillTestData(dtype, op, 77 + static_cast<uint64_t>(rank), node.data(),
                                          kCount);
        // A NaN with the node in its payload every 7th element.
        for (size_t i = static_cast<size_t>(rank); i < kCount; i += 7) {
          std::byte* at = node.data() + i * ElementSize(dtype);
          std::memset(at, 0xff, ElementSize(dtype));
          at[0] = static_cast<std::byte>(rank + 1);
        }
        data.push_back(std::move(node));
      }
      const Bytes expected = Reference(dtype, op, data, kCount);
      std::vector<Bytes> reduced = data;
      std::vector<exec::Pending> pending;
      for (int rank = 0; rank < world.size(); ++rank) {
        Start(pending, world.transports[rank]->StartAllreduce(world.spans[rank], data[rank].data(),
                                                              kCount, dtype, op));
        Start(pending, world.transports[rank]->StartReduce(world.spans[rank], reduced[rank].data(),
                                                           kCount, dtype, op, world.size() - 1));
      }
      ASSERT_TRUE(WaitAll(pending).ok());
      for (int rank = 0; rank < world.size(); ++rank) {
        EXPECT_EQ(
            collective::testing::CompareBitwise(dtype, expected.data(), data[rank].data(), kCount),
            "")
            << DataTypeName(dtype) << " " << ReduceOpName(op) << " allreduce, node " << rank;
      }
      EXPECT_EQ(collective::testing::CompareBitwise(dtype, expected.data(),
                                                    reduced[world.size() - 1].data(), kCount),
                "")
          << DataTypeName(dtype) << " " << ReduceOpName(op) << " reduce";
    }
  }
}

TEST_P(GlooTransportTest, ReduceLeavesTheOthersDataAsItWas) {
  World world(GetParam());
  constexpr size_t kCount = 517;
  for (v1::DataType dtype : {v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_INT8, v1::DATA_TYPE_FLOAT64,
                             v1::DATA_TYPE_BOOL, v1::DATA_TYPE_UINT16}) {
    for (v1::ReduceOp op : kOps) {
      if (!exec::IsReducible(dtype, op)) continue;
      for (int root = 0; root < world.size(); ++root) {
        std::vector<Bytes> data;
        for (int rank = 0; rank < world.size(); ++rank) {
          data.push_back(NodeData(dtype, op, rank, kCount));
        }
        const std::vector<Bytes> before = data;
        const Bytes expected = Reference(dtype, op, data, kCount);
        std::vector<exec::Pending> pending;
        for (int rank = 0; rank < world.size(); ++rank) {
          Start(pending, world.transports[rank]->StartReduce(world.spans[rank], data[rank].data(),
                                                             kCount, dtype, op, root));
        }
        ASSERT_TRUE(WaitAll(pending).ok());
        for (int rank = 0; rank < world.size(); ++rank) {
          const Bytes& wanted = rank == root ? expected : before[rank];
          EXPECT_EQ(
              collective::testing::CompareBitwise(dtype, wanted.data(), data[rank].data(), kCount),
              "")
              << DataTypeName(dtype) << " " << ReduceOpName(op) << " root " << root << " node "
              << rank;
        }
      }
    }
  }
}

TEST_P(GlooTransportTest, ReduceScatterKeepsEachNodesUnevenBlock) {
  World world(GetParam());
  // Uneven, one empty, one larger than the transport's 1 MiB piece.
  const std::vector<uint64_t> counts =
      world.size() == 2 ? std::vector<uint64_t>{7, 300001} : std::vector<uint64_t>{300001, 0, 5};
  const uint64_t total = std::accumulate(counts.begin(), counts.end(), uint64_t{0});
  for (v1::DataType dtype : AllTypes()) {
    for (v1::ReduceOp op : kOps) {
      if (!exec::IsReducible(dtype, op)) continue;
      std::vector<Bytes> data;
      for (int rank = 0; rank < world.size(); ++rank) {
        data.push_back(NodeData(dtype, op, rank, total));
      }
      const Bytes expected = Reference(dtype, op, data, total);
      std::vector<exec::Pending> pending;
      for (int rank = 0; rank < world.size(); ++rank) {
        Start(pending, world.transports[rank]->StartReduceScatter(
                           world.spans[rank], data[rank].data(), counts, dtype, op));
      }
      ASSERT_TRUE(WaitAll(pending).ok());
      uint64_t first = 0;
      for (int rank = 0; rank < world.size(); ++rank) {
        EXPECT_EQ(
            collective::testing::CompareBitwise(dtype, expected.data() + first * ElementSize(dtype),
                                                data[rank].data(), counts[rank]),
            "")
            << DataTypeName(dtype) << " " << ReduceOpName(op) << " node " << rank;
        first += counts[rank];
      }
    }
  }
}

// Rows of `row_bytes` whose bytes name their node and row.
Bytes Rows(int node, uint64_t rows, uint64_t row_bytes) {
  Bytes out(rows * row_bytes);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(node * 37 + i * 11 + 1);
  return out;
}

void CheckGathered(const World& world, bool to_all, int root, const std::vector<uint64_t>& rows,
                   const std::vector<uint64_t>& displs, uint64_t row_bytes) {
  uint64_t end = 3;  // rows past the last block stay as they were
  for (size_t place = 0; place < rows.size(); ++place) {
    end = std::max(end, displs[place] + rows[place] + 3);
  }
  std::vector<Bytes> data(world.size(), Bytes(end * row_bytes, std::byte{0xee}));
  for (int rank = 0; rank < world.size(); ++rank) {
    const Bytes mine = Rows(rank, rows[rank], row_bytes);
    std::copy(mine.begin(), mine.end(), data[rank].begin() + displs[rank] * row_bytes);
  }
  const std::vector<Bytes> before = data;
  std::vector<exec::Pending> pending;
  for (int rank = 0; rank < world.size(); ++rank) {
    Start(pending, to_all
                       ? world.transports[rank]->StartAllgather(
                             world.spans[rank], data[rank].data(), row_bytes, rows, displs)
                       : world.transports[rank]->StartGather(world.spans[rank], data[rank].data(),
                                                             row_bytes, rows, displs, root));
  }
  ASSERT_TRUE(WaitAll(pending).ok());
  for (int rank = 0; rank < world.size(); ++rank) {
    if (!to_all && rank != root) {
      EXPECT_EQ(data[rank], before[rank]) << "node " << rank << " is no root";
      continue;
    }
    for (int from = 0; from < world.size(); ++from) {
      const Bytes wanted = Rows(from, rows[from], row_bytes);
      EXPECT_TRUE(
          std::equal(wanted.begin(), wanted.end(), data[rank].begin() + displs[from] * row_bytes))
          << "node " << from << "'s rows on node " << rank;
    }
  }
}

TEST_P(GlooTransportTest, AllgatherPlacesUnevenBlocksBackToBackOrApart) {
  World world(GetParam());
  const bool three = world.size() == 3;
  const std::vector<uint64_t> rows =
      three ? std::vector<uint64_t>{3, 0, 70000} : std::vector<uint64_t>{5, 2};
  std::vector<uint64_t> back_to_back(rows.size());
  std::exclusive_scan(rows.begin(), rows.end(), back_to_back.begin(), uint64_t{0});
  CheckGathered(world, true, 0, rows, back_to_back, 12);
  const std::vector<uint64_t> apart =
      three ? std::vector<uint64_t>{70010, 2, 4} : std::vector<uint64_t>{9, 1};
  CheckGathered(world, true, 0, rows, apart, 12);
}

TEST_P(GlooTransportTest, GatherFillsTheRootOnly) {
  World world(GetParam());
  const std::vector<uint64_t> rows =
      world.size() == 3 ? std::vector<uint64_t>{4, 1, 0} : std::vector<uint64_t>{0, 9};
  const std::vector<uint64_t> displs =
      world.size() == 3 ? std::vector<uint64_t>{6, 0, 20} : std::vector<uint64_t>{3, 4};
  for (int root = 0; root < world.size(); ++root)
    CheckGathered(world, false, root, rows, displs, 5);
}

TEST_P(GlooTransportTest, BroadcastFromEveryRoot) {
  World world(GetParam());
  constexpr uint64_t kBytes = 1234567;
  for (int root = 0; root < world.size(); ++root) {
    std::vector<Bytes> data;
    for (int rank = 0; rank < world.size(); ++rank)
      data.push_back(Rows(rank + 10 * root, 1, kBytes));
    const Bytes expected = data[root];
    std::vector<exec::Pending> pending;
    for (int rank = 0; rank < world.size(); ++rank) {
      Start(pending, world.transports[rank]->StartBroadcast(world.spans[rank], data[rank].data(),
                                                            kBytes, root));
    }
    ASSERT_TRUE(WaitAll(pending).ok());
    for (int rank = 0; rank < world.size(); ++rank) EXPECT_EQ(data[rank], expected) << rank;
  }
}

TEST_P(GlooTransportTest, ExchangeMovesRowsCutIntoBlocksDifferentlyOnEachSide) {
  World world(GetParam());
  const int n = world.size();
  constexpr uint64_t kRowBytes = 6;
  // Rows node i sends node j.
  auto count = [](int from, int to) {
    return static_cast<uint64_t>(from * 3 + to * 5 + (from == to ? 0 : 2));
  };
  std::vector<std::vector<Bytes>> sources(n);  // [i][j]: node i's rows for node j
  std::vector<std::vector<Bytes>> targets(n);  // [j][i]: where node j puts node i's rows
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      sources[i].push_back(Rows(i * 10 + j, count(i, j), kRowBytes));
      targets[i].push_back(Bytes(count(j, i) * kRowBytes));
    }
  }
  // Senders cut their rows in two blocks, receivers in three, or not at all.
  auto cut = [](const Bytes& bytes, int pieces) {
    std::vector<exec::RowBlock> blocks;
    const uint64_t rows = bytes.size() / kRowBytes;
    uint64_t at = 0;
    for (int piece = 0; piece < pieces; ++piece) {
      const uint64_t take = piece + 1 == pieces ? rows - at : rows / static_cast<uint64_t>(pieces);
      blocks.push_back({bytes.data() + at * kRowBytes, take});
      at += take;
    }
    return blocks;
  };
  std::vector<exec::Pending> pending;
  for (int i = 0; i < n; ++i) {
    std::vector<std::vector<exec::RowBlock>> send;
    std::vector<std::vector<exec::RowBlock>> receive;
    for (int j = 0; j < n; ++j) {
      send.push_back(cut(sources[i][j], (i + j) % 2 == 0 ? 2 : 1));
      receive.push_back(cut(targets[i][j], (i + j) % 3 == 0 ? 3 : 1));
    }
    Start(pending, world.transports[i]->StartExchange(world.spans[i], kRowBytes, send, receive));
  }
  ASSERT_TRUE(WaitAll(pending).ok());
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) EXPECT_EQ(targets[j][i], sources[i][j]) << i << " to " << j;
  }
}

TEST_P(GlooTransportTest, PipelinedTransfersOfDifferentKindsNeverMix) {
  World world(GetParam());
  constexpr int kRounds = 6;
  const std::vector<uint64_t> counts = {1, 100, 400000, 3, 262144, 77};
  std::vector<std::vector<Bytes>> sums(kRounds);
  std::vector<Bytes> expected;
  std::vector<std::vector<Bytes>> broadcasts(kRounds);
  std::vector<exec::Pending> pending;
  for (int round = 0; round < kRounds; ++round) {
    for (int rank = 0; rank < world.size(); ++rank) {
      sums[round].push_back(
          NodeData(v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM, rank, counts[round]));
      broadcasts[round].push_back(Rows(rank + round, 1, 1000 + round));
    }
    expected.push_back(
        Reference(v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM, sums[round], counts[round]));
  }
  for (int rank = 0; rank < world.size(); ++rank) {
    for (int round = 0; round < kRounds; ++round) {
      Start(pending, world.transports[rank]->StartAllreduce(
                         world.spans[rank], sums[round][rank].data(), counts[round],
                         v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM));
      Start(pending, world.transports[rank]->StartBroadcast(
                         world.spans[rank], broadcasts[round][rank].data(),
                         broadcasts[round][rank].size(), round % world.size()));
    }
  }
  ASSERT_TRUE(WaitAll(pending).ok());
  for (int round = 0; round < kRounds; ++round) {
    for (int rank = 0; rank < world.size(); ++rank) {
      EXPECT_EQ(sums[round][rank], expected[round]) << "round " << round << " node " << rank;
      EXPECT_EQ(broadcasts[round][rank], broadcasts[round][round % world.size()]);
    }
  }
}

TEST_P(GlooTransportTest, MessagesOfSeveralTagsPassOutOfOrder) {
  World world(GetParam());
  const int last = world.size() - 1;
  constexpr uint64_t kChunk = 4096;
  const std::vector<int> tags = {11, 12, 13};
  const std::vector<uint64_t> sizes = {100000, 1, 4096 * 3};
  std::vector<Bytes> sent;
  std::vector<Bytes> received;
  Bytes back = Rows(99, 1, 50000);
  Bytes back_received(back.size());
  for (size_t m = 0; m < tags.size(); ++m) {
    sent.push_back(Rows(static_cast<int>(m), 1, sizes[m]));
    received.emplace_back(sizes[m]);
  }
  std::vector<exec::Pending> pending;
  // The receiver starts its receives in the opposite order, and a message
  // the other way at once.
  for (size_t m = tags.size(); m-- > 0;) {
    Start(pending, world.transports[last]->StartReceive(world.spans[last], 0, received[m].data(),
                                                        sizes[m], tags[m], kChunk));
  }
  Start(pending, world.transports[last]->StartSend(world.spans[last], 0, back.data(), back.size(),
                                                   tags[0], kChunk));
  for (size_t m = 0; m < tags.size(); ++m) {
    Start(pending, world.transports[0]->StartSend(world.spans[0], last, sent[m].data(), sizes[m],
                                                  tags[m], kChunk));
  }
  Start(pending, world.transports[0]->StartReceive(world.spans[0], last, back_received.data(),
                                                   back.size(), tags[0], kChunk));
  ASSERT_TRUE(WaitAll(pending).ok());
  for (size_t m = 0; m < tags.size(); ++m) EXPECT_EQ(received[m], sent[m]) << "tag " << tags[m];
  EXPECT_EQ(back_received, back);
}

INSTANTIATE_TEST_SUITE_P(Nodes, GlooTransportTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return absl::StrCat(param.param, "Nodes");
                         });

TEST(GlooTransportSubsetTest, ASetOnTwoOfThreeNodesRunsBesideTheWholeJob) {
  World world(3);
  // The set of nodes 1 and 2 has a context of its own.
  std::vector<std::shared_ptr<::gloo::Context>> pair = testing::ConnectLocalContexts(2, 20s);
  const std::vector<int32_t> pair_nodes = {kNodes[1], kNodes[2]};
  std::vector<job::SetSpan> pair_spans = {testing::SpanOf(pair[0], pair_nodes),
                                          testing::SpanOf(pair[1], pair_nodes)};
  constexpr size_t kCount = 5000;
  std::vector<Bytes> whole;
  std::vector<Bytes> part;
  for (int rank = 0; rank < 3; ++rank) {
    whole.push_back(NodeData(v1::DATA_TYPE_INT32, v1::REDUCE_OP_SUM, rank, kCount));
  }
  for (int rank = 0; rank < 2; ++rank) {
    part.push_back(NodeData(v1::DATA_TYPE_BFLOAT16, v1::REDUCE_OP_MAX, rank + 5, kCount));
  }
  const Bytes whole_expected = Reference(v1::DATA_TYPE_INT32, v1::REDUCE_OP_SUM, whole, kCount);
  const Bytes part_expected = Reference(v1::DATA_TYPE_BFLOAT16, v1::REDUCE_OP_MAX, part, kCount);
  std::vector<exec::Pending> pending;
  Start(pending, world.transports[0]->StartAllreduce(world.spans[0], whole[0].data(), kCount,
                                                     v1::DATA_TYPE_INT32, v1::REDUCE_OP_SUM));
  for (int rank = 1; rank < 3; ++rank) {
    // The two sets' transfers in opposite orders on the two nodes: each
    // context keeps its own order.
    if (rank == 1) {
      Start(pending,
            world.transports[rank]->StartAllreduce(world.spans[rank], whole[rank].data(), kCount,
                                                   v1::DATA_TYPE_INT32, v1::REDUCE_OP_SUM));
    }
    Start(pending, world.transports[rank]->StartAllreduce(
                       pair_spans[rank - 1], part[rank - 1].data(), kCount, v1::DATA_TYPE_BFLOAT16,
                       v1::REDUCE_OP_MAX));
    if (rank == 2) {
      Start(pending,
            world.transports[rank]->StartAllreduce(world.spans[rank], whole[rank].data(), kCount,
                                                   v1::DATA_TYPE_INT32, v1::REDUCE_OP_SUM));
    }
  }
  ASSERT_TRUE(WaitAll(pending).ok());
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(whole[rank], whole_expected) << rank;
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(part[rank], part_expected) << rank;
}

TEST(GlooTransportFailureTest, APeerWhoseContextIsDestroyedIsNamed) {
  constexpr auto kTimeout = 20s;
  World world(3, kTimeout);
  constexpr size_t kCount = 100000;
  std::vector<Bytes> data;
  for (int rank = 0; rank < 3; ++rank) data.emplace_back(kCount * 4);
  // A job that ran a while: every node took part in a transfer.
  std::vector<exec::Pending> warm;
  for (int rank = 0; rank < 3; ++rank) {
    Start(warm, world.transports[rank]->StartBroadcast(world.spans[rank], data[rank].data(),
                                                       data[rank].size(), 0));
  }
  ASSERT_TRUE(WaitAll(warm).ok());
  std::vector<exec::Pending> pending;
  for (int rank = 0; rank < 2; ++rank) {
    Start(pending,
          world.transports[rank]->StartAllreduce(world.spans[rank], data[rank].data(), kCount,
                                                 v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM));
  }
  // Node 2 (job node 8) goes away instead of joining.
  const Clock::time_point gone = Clock::now();
  world.transports[2].reset();
  world.spans[2].group.reset();
  world.contexts[2].reset();
  for (int rank = 0; rank < 2; ++rank) {
    const absl::Status failed = WaitOne(*pending[rank], kTimeout + 10s);
    EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
    EXPECT_NE(failed.message().find("allreduce across nodes failed"), std::string::npos) << failed;
    EXPECT_NE(failed.message().find("node 8"), std::string::npos) << failed;
  }
  EXPECT_LT(Clock::now() - gone, kTimeout / 2) << "the failure waited for the timeout";
  // Later transfers on the broken context fail at once, with the same cause.
  absl::StatusOr<exec::Pending> later =
      world.transports[0]->StartBroadcast(world.spans[0], data[0].data(), 10, 0);
  ASSERT_TRUE(later.ok());
  const absl::Status failed = WaitOne(**later, 10s);
  EXPECT_NE(failed.message().find("broadcast across nodes failed"), std::string::npos) << failed;
  EXPECT_NE(failed.message().find("node 8"), std::string::npos) << failed;
}

TEST(GlooTransportFailureTest, APeerThatLeavesMidTransferIsNamed) {
  constexpr auto kTimeout = 20s;
  World world(3, kTimeout);
  constexpr size_t kCount = 1 << 20;
  std::vector<Bytes> data(3, Bytes(kCount * 4));
  // Nodes 0 and 2 (job nodes 3 and 8) are in the allreduce, waiting for
  // node 1; node 2 leaves.
  std::vector<exec::Pending> pending;
  for (int rank : {0, 2}) {
    Start(pending,
          world.transports[rank]->StartAllreduce(world.spans[rank], data[rank].data(), kCount,
                                                 v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM));
  }
  EXPECT_EQ(WaitOne(*pending[1], 100ms).code(), absl::StatusCode::kDeadlineExceeded);
  const Clock::time_point gone = Clock::now();
  world.transports[2].reset();
  world.spans[2].group.reset();
  world.contexts[2].reset();
  // Node 1 joins late.
  Start(pending, world.transports[1]->StartAllreduce(world.spans[1], data[1].data(), kCount,
                                                     v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM));
  for (size_t node : {size_t{0}, size_t{2}}) {
    const absl::Status failed = WaitOne(*pending[node], kTimeout);
    EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
    EXPECT_NE(failed.message().find("node 8"), std::string::npos) << failed;
  }
  EXPECT_LT(Clock::now() - gone, kTimeout / 2) << "the failure waited for the timeout";
}

TEST(GlooTransportFailureTest, AReceiveFromAPeerThatLeavesFailsNamingIt) {
  constexpr auto kTimeout = 20s;
  World world(2, kTimeout);
  Bytes data(1 << 16);
  absl::StatusOr<exec::Pending> receive =
      world.transports[0]->StartReceive(world.spans[0], 1, data.data(), data.size(), 4, 1024);
  ASSERT_TRUE(receive.ok());
  world.transports[1].reset();
  world.spans[1].group.reset();
  world.contexts[1].reset();
  const absl::Status failed = WaitOne(**receive, kTimeout / 2);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_NE(failed.message().find("receive of a message across nodes failed"), std::string::npos)
      << failed;
  EXPECT_NE(failed.message().find("node 5"), std::string::npos) << failed;
}

TEST(GlooTransportFailureTest, APeerThatLeavesWhileDataStreamsIsNamedBeforeTheTimeout) {
  // Gloo does not fail a receive whose bytes it is reading when the
  // connection breaks: the transport must notice anyway.
  constexpr auto kTimeout = 30s;
  World world(2, kTimeout);
  Bytes big(256 << 20);
  Bytes sink(big.size());
  std::vector<exec::Pending> pending;
  Start(pending,
        world.transports[1]->StartSend(world.spans[1], 0, big.data(), big.size(), 9, big.size()));
  Start(pending, world.transports[0]->StartReceive(world.spans[0], 1, sink.data(), sink.size(), 9,
                                                   sink.size()));
  const Clock::time_point gone = Clock::now();
  world.transports[1].reset();
  const absl::Status failed = WaitOne(*pending[1], kTimeout + 10s);
  // Unless the whole message made it before node 1 left.
  if (!failed.ok()) {
    EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
    EXPECT_NE(failed.message().find("node 5"), std::string::npos) << failed;
  }
  EXPECT_LT(Clock::now() - gone, kTimeout / 2) << failed;
}

TEST(GlooTransportFailureTest, ATimeoutFailsTheTransferNamingTheSilentNodes) {
  constexpr auto kTimeout = 300ms;
  World world(2, kTimeout);
  Bytes data(64);
  absl::StatusOr<exec::Pending> alone = world.transports[0]->StartAllreduce(
      world.spans[0], data.data(), 16, v1::DATA_TYPE_INT32, v1::REDUCE_OP_SUM);
  ASSERT_TRUE(alone.ok());
  const absl::Status failed = WaitOne(**alone, 10s);
  EXPECT_EQ(failed.code(), absl::StatusCode::kDeadlineExceeded) << failed;
  EXPECT_NE(failed.message().find("node 5"), std::string::npos) << failed;
}

TEST(GlooTransportAbortTest, AbortReturnsPromptlyWithTransfersBlocked) {
  World world(2, 60s);
  Bytes data(1 << 20);
  Bytes message(1 << 16);
  Bytes abandoned(4096);
  absl::StatusOr<exec::Pending> blocked = world.transports[0]->StartAllreduce(
      world.spans[0], data.data(), data.size() / 4, v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_MIN);
  absl::StatusOr<exec::Pending> receive =
      world.transports[0]->StartReceive(world.spans[0], 1, message.data(), message.size(), 1, 512);
  absl::StatusOr<exec::Pending> dropped =
      world.transports[0]->StartBroadcast(world.spans[0], abandoned.data(), abandoned.size(), 1);
  ASSERT_TRUE(blocked.ok() && receive.ok() && dropped.ok());
  dropped->reset();  // abandoned before it ran: safe
  EXPECT_EQ(WaitOne(**blocked, 200ms).code(), absl::StatusCode::kDeadlineExceeded);
  const Clock::time_point start = Clock::now();
  world.transports[0]->Abort("the job failed");
  EXPECT_LT(Clock::now() - start, 5s);
  for (exec::Pending* transfer : {&*blocked, &*receive}) {
    const absl::StatusOr<bool> tested = (*transfer)->Test();
    ASSERT_FALSE(tested.ok());
    EXPECT_EQ(tested.status().code(), absl::StatusCode::kAborted) << tested.status();
    EXPECT_NE(tested.status().message().find("the job failed"), std::string::npos);
  }
  absl::StatusOr<exec::Pending> after = world.transports[0]->StartAllreduce(
      world.spans[0], data.data(), 1, v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kFailedPrecondition);
  // The other node sees this one leave.
  absl::StatusOr<exec::Pending> other = world.transports[1]->StartAllreduce(
      world.spans[1], data.data(), 1, v1::DATA_TYPE_FLOAT32, v1::REDUCE_OP_SUM);
  ASSERT_TRUE(other.ok());
  const absl::Status failed = WaitOne(**other, 10s);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_NE(failed.message().find("node 3"), std::string::npos) << failed;
}

TEST(GlooTransportArgumentsTest, RefusesWhatTheKernelsCannotCombine) {
  World world(2);
  Bytes data(64);
  for (v1::ReduceOp op : {v1::REDUCE_OP_ADASUM, v1::REDUCE_OP_AVERAGE}) {
    EXPECT_EQ(world.transports[0]
                  ->StartAllreduce(world.spans[0], data.data(), 4, v1::DATA_TYPE_FLOAT32, op)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(
      world.transports[0]
          ->StartAllreduce(world.spans[0], data.data(), 4, v1::DATA_TYPE_BOOL, v1::REDUCE_OP_SUM)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(world.transports[0]->StartBroadcast(world.spans[0], data.data(), 4, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(world.transports[0]->StartSend(world.spans[0], 0, data.data(), 4, 1, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace collective::daemon::gloo
