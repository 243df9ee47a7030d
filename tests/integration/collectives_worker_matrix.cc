// The matrix scenarios: every dtype at every size of the matrix (0, 1, 7,
// 4096 + 3 elements and beyond the fusion threshold), inputs in private
// memory and in the arena, results copied out, viewed or written in place,
// each checked bitwise; then grouped collectives and many requests of mixed
// collectives outstanding at once.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "tests/integration/collectives_checks.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {
namespace {

constexpr size_t kMidCount = 4096 + 3;

size_t BigBytes(const Args& args) { return std::stoull(Flag(args, "--big-bytes", "65536")); }

// Rows a set rank sends to an allgather of base `count`: ranks 1, 4, ...
// send none, the others `count` or `count` + 2.
int64_t GatherRows(size_t count, int member) {
  if (member % 3 == 1) return 0;
  return static_cast<int64_t>(count) + member % 3;
}

std::vector<int64_t> GatherRowsOf(const Team& team, size_t count) {
  std::vector<int64_t> rows;
  for (int m = 0; m < team.size(); ++m) rows.push_back(GatherRows(count, m));
  return rows;
}

// How a case places its input and result.
struct Placement {
  bool arena;
  Out out;
  const char* label;
};

void Done(const Client& client, const char* what, int cases) {
  Say(absl::StrCat("ok ", cases, " ", what, " cases on rank ", client.rank(), " of ",
                   client.size()));
}

}  // namespace

int AllgatherMatrix(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  int cases = 0;
  for (v1::DataType dtype : AllDataTypes()) {
    for (size_t count : MatrixCounts(dtype, BigBytes(args))) {
      for (bool arena : {false, true}) {
        for (bool rows_of_six : {false, true}) {
          if (rows_of_six && count > kMidCount) continue;
          GatherCase c{
              .name = absl::StrCat("ag.", DataTypeName(dtype), ".", count,
                                   arena ? ".arena" : ".private", rows_of_six ? ".3x2" : ""),
              .dtype = dtype,
              .rows = GatherRowsOf(team, count),
              .trailing = rows_of_six ? std::vector<int64_t>{3, 2} : std::vector<int64_t>{},
              .arena = arena};
          Submitted s = SubmitAllgather(*client, team, c);
          Check(*client, s);
          ++cases;
        }
      }
    }
  }
  Done(*client, "allgather", cases);
  return 0;
}

int BroadcastMatrix(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  const Placement placements[] = {{false, Out::kCopy, "copy"},
                                  {true, Out::kView, "zerocopy"},
                                  {false, Out::kInPlace, "inplace"},
                                  {true, Out::kInPlace, "inplace-arena"}};
  int cases = 0;
  for (v1::DataType dtype : AllDataTypes()) {
    for (size_t count : MatrixCounts(dtype, BigBytes(args))) {
      for (const Placement& p : placements) {
        // The root moves on with every case, so every rank is a root often.
        const int root = cases % team.size();
        BroadcastCase c{.name = absl::StrCat("bc.", DataTypeName(dtype), ".", count, ".", p.label),
                        .dtype = dtype,
                        .shape = {static_cast<int64_t>(count)},
                        .root = root,
                        .arena = p.arena,
                        .out = p.out};
        Submitted s = SubmitBroadcast(*client, team, c);
        Check(*client, s);
        ++cases;
      }
    }
  }
  // Every root, with multi-dimensional tensors, in each placement.
  for (int root = 0; root < team.size(); ++root) {
    for (const Placement& p : placements) {
      BroadcastCase c{.name = absl::StrCat("bc.root", root, ".", p.label),
                      .dtype = AllDataTypes()[static_cast<size_t>(root) % 11],
                      .shape = {3, 5, 2},
                      .root = root,
                      .arena = p.arena,
                      .out = p.out};
      Submitted s = SubmitBroadcast(*client, team, c);
      Check(*client, s);
      ++cases;
    }
  }
  Done(*client, "broadcast", cases);
  return 0;
}

int AlltoallMatrix(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  int cases = 0;
  for (v1::DataType dtype : AllDataTypes()) {
    for (size_t count : MatrixCounts(dtype, BigBytes(args))) {
      for (bool arena : {false, true}) {
        for (bool uneven : {false, true}) {
          const bool rows_of_six = count <= kMidCount && cases % 2 == 1;
          // Rows for each destination. The largest tensor keeps its size in
          // all (beyond the fusion threshold) however many ranks there are.
          const auto rows = static_cast<int64_t>(
              count <= kMidCount ? count : count / static_cast<size_t>(team.size()) + 1);
          AlltoallCase c{
              .name = absl::StrCat("a2a.", DataTypeName(dtype), ".", count,
                                   arena ? ".arena" : ".private", uneven ? ".splits" : ".even"),
              .dtype = dtype,
              .splits = uneven ? UnevenSplits(team.size(), rows) : EvenSplits(team.size(), rows),
              .trailing = rows_of_six ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{},
              // Even splits are given explicitly in every other case.
              .pass_splits = uneven || cases % 4 == 0,
              .arena = arena};
          Submitted s = SubmitAlltoall(*client, team, c);
          Check(*client, s);
          ++cases;
        }
      }
    }
  }
  Done(*client, "alltoall", cases);
  return 0;
}

int ReducescatterMatrix(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  int cases = 0;
  for (v1::DataType dtype : NumericDataTypes()) {
    for (v1::ReduceOp op : {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE}) {
      for (size_t count : MatrixCounts(dtype, BigBytes(args))) {
        // Rows of three elements in half the cases that are small enough;
        // scale factors in a third; private memory and the arena in turn.
        const bool rows_of_three = count <= kMidCount && cases % 4 >= 2;
        const bool scaled = cases % 3 == 1;
        const bool arena = cases % 2 == 1;
        std::vector<int64_t> shape = {static_cast<int64_t>(count)};
        if (rows_of_three) shape.push_back(3);
        ReduceCase c{.name = absl::StrCat("rs.", DataTypeName(dtype), ".", ReduceOpName(op), ".",
                                          count, scaled ? ".scaled" : ""),
                     .dtype = dtype,
                     .op = op,
                     .prescale = scaled ? 0.5 : 1.0,
                     .postscale = scaled ? 4.0 : 1.0,
                     .shape = shape,
                     .arena = arena,
                     .out = arena ? Out::kView : Out::kCopy};
        Submitted s = SubmitReducescatter(*client, team, c);
        Check(*client, s);
        ++cases;
      }
    }
  }
  // The shares of a few first dimensions that do not divide: 7 rows, one
  // row (every rank but the first gets none), 2 * size + 1 rows.
  for (int64_t rows : {int64_t{7}, int64_t{1}, int64_t{2} * team.size() + 1}) {
    ReduceCase c{.name = absl::StrCat("rs.uneven.", rows),
                 .dtype = v1::DATA_TYPE_FLOAT32,
                 .op = v1::REDUCE_OP_AVERAGE,
                 .shape = {rows, 2},
                 .out = Out::kCopy};
    Submitted s = SubmitReducescatter(*client, team, c);
    Check(*client, s);
    ++cases;
  }
  Done(*client, "reducescatter", cases);
  return 0;
}

}  // namespace collective::testing
