#include "tests/integration/collectives_checks.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "daemon/exec/reduce_kernels.h"
#include "tests/common/reference_reduce.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {
namespace {

using Bytes = std::vector<std::byte>;

size_t Elements(const std::vector<int64_t>& shape, size_t from = 0) {
  size_t count = 1;
  for (size_t i = from; i < shape.size(); ++i) count *= static_cast<size_t>(shape[i]);
  return count;
}

std::vector<int64_t> WithRows(int64_t rows, const std::vector<int64_t>& trailing) {
  std::vector<int64_t> shape = {rows};
  shape.insert(shape.end(), trailing.begin(), trailing.end());
  return shape;
}

const char* OutName(Out out) {
  switch (out) {
    case Out::kView:
      return "view";
    case Out::kCopy:
      return "copy-out";
    case Out::kInPlace:
      return "in-place";
  }
  return "?";
}

Submitted Base(const std::string& name, const char* collective, v1::DataType dtype, bool arena,
               Out out, const std::vector<int64_t>& shape) {
  Submitted s;
  s.name = name;
  s.dtype = dtype;
  s.label = absl::StrCat(collective, " '", name, "' (", DataTypeName(dtype), " [",
                         absl::StrJoin(shape, ", "), "], ", arena ? "arena" : "private", " input, ",
                         OutName(out), ")");
  return s;
}

// Puts this rank's input where the case says and describes it.
void PlaceInput(Client& client, Submitted& s, Bytes data, const std::vector<int64_t>& shape,
                bool arena) {
  const void* input = nullptr;
  if (arena) {
    s.arena_input = ValueOrDie(client.Allocate(data.size()), s.label + ": allocate");
    if (!data.empty()) std::memcpy(s.arena_input.data(), data.data(), data.size());
    input = s.arena_input.data();
  } else {
    s.private_input = std::move(data);
    input = s.private_input.data();
  }
  s.view = TensorView{input, static_cast<DataType>(s.dtype), shape};
}

// `bytes`: the size of this rank's result, for a private output buffer.
void PlaceOutput(Submitted& s, Out out, size_t bytes) {
  switch (out) {
    case Out::kView:
      s.output = nullptr;
      break;
    case Out::kCopy:
      // At least one byte: an empty vector has no address, and a null
      // output would ask for a view instead.
      s.output_buffer.assign(std::max<size_t>(bytes, 1), std::byte{0x5a});
      s.output = s.output_buffer.data();
      break;
    case Out::kInPlace:
      s.output = const_cast<void*>(s.view.data);
      break;
  }
}

// The reduction of every member's data (zeros for joined members).
Bytes Reduced(const Team& team, const ReduceCase& c, size_t count) {
  const bool average = c.op == v1::REDUCE_OP_AVERAGE;
  const v1::ReduceOp kernel_op = average ? v1::REDUCE_OP_SUM : c.op;
  const size_t bytes = count * ElementSize(c.dtype);
  std::vector<Bytes> inputs;
  std::vector<const void*> pointers;
  for (int m = 0; m < team.size(); ++m) {
    const bool zero =
        std::find(c.zero_members.begin(), c.zero_members.end(), m) != c.zero_members.end();
    inputs.push_back(zero ? Bytes(bytes)
                          : RankData(c.name, team.members[m], c.dtype, count, kernel_op));
  }
  for (const Bytes& input : inputs) pointers.push_back(input.data());
  daemon::exec::ReduceSpec spec{c.dtype, kernel_op, c.prescale, c.postscale, 1};
  if (average) spec.divisor = team.size();
  Bytes out(bytes);
  ReferenceReduce(spec, pointers, out.data(), count);
  return out;
}

v1::ReduceOp KernelOp(v1::ReduceOp op) {
  return op == v1::REDUCE_OP_AVERAGE ? v1::REDUCE_OP_SUM : op;
}

AllreduceOptions OptionsOf(const Team& team, const ReduceCase& c) {
  return {.op = static_cast<ReduceOp>(c.op),
          .prescale = c.prescale,
          .postscale = c.postscale,
          .process_set = team.set};
}

void Submitted1(Submitted& s, absl::StatusOr<Client::Handle> handle) {
  s.handle = ValueOrDie(std::move(handle), s.label + ": submit");
}

}  // namespace

Team GlobalTeam(const Client& client) {
  Team team;
  for (int rank = 0; rank < client.size(); ++rank) team.members.push_back(rank);
  team.me = client.rank();
  return team;
}

Team TeamOf(const Client& client, const ProcessSet& set) {
  return Team{.set = set.id, .members = set.ranks, .me = set.rank_of(client.rank())};
}

namespace {
bool compare_closely = false;
}  // namespace

void CompareReductionsClosely(bool closely) { compare_closely = closely; }

Submitted PrepareAllreduce(Client& client, const Team& team, const ReduceCase& c) {
  Submitted s = Base(c.name, "allreduce", c.dtype, c.arena, c.out, c.shape);
  s.reduced = true;
  const size_t count = Elements(c.shape);
  s.expected = Reduced(team, c, count);
  s.expected_shape = c.shape;
  PlaceInput(client, s, RankData(c.name, team.members[team.me], c.dtype, count, KernelOp(c.op)),
             c.shape, c.arena);
  PlaceOutput(s, c.out, s.expected.size());
  return s;
}

Submitted PrepareReducescatter(Client& client, const Team& team, const ReduceCase& c) {
  Submitted s = Base(c.name, "reducescatter", c.dtype, c.arena, c.out, c.shape);
  s.reduced = true;
  const size_t count = Elements(c.shape);
  const Bytes whole = Reduced(team, c, count);
  // The first (rows mod size) ranks get one row more.
  const int64_t rows = c.shape.front();
  const int64_t size = team.size();
  const int64_t base = rows / size;
  const int64_t extra = rows % size;
  const int64_t mine = base + (team.me < extra ? 1 : 0);
  const int64_t first = team.me * base + std::min<int64_t>(team.me, extra);
  const size_t row_bytes = Elements(c.shape, 1) * ElementSize(c.dtype);
  s.expected.assign(whole.begin() + static_cast<ptrdiff_t>(first * row_bytes),
                    whole.begin() + static_cast<ptrdiff_t>((first + mine) * row_bytes));
  s.expected_shape = c.shape;
  s.expected_shape.front() = mine;
  PlaceInput(client, s, RankData(c.name, team.members[team.me], c.dtype, count, KernelOp(c.op)),
             c.shape, c.arena);
  PlaceOutput(s, c.out, s.expected.size());
  return s;
}

Submitted PrepareAllgather(Client& client, const Team& team, const GatherCase& c) {
  const std::vector<int64_t> shape = WithRows(c.rows[team.me], c.trailing);
  Submitted s = Base(c.name, "allgather", c.dtype, c.arena, Out::kView, shape);
  const size_t row_elements = Elements(c.trailing);
  int64_t total = 0;
  for (int m = 0; m < team.size(); ++m) {
    const Bytes data =
        RankData(c.name, team.members[m], c.dtype, static_cast<size_t>(c.rows[m]) * row_elements);
    s.expected.insert(s.expected.end(), data.begin(), data.end());
    total += c.rows[m];
  }
  s.expected_shape = WithRows(total, c.trailing);
  PlaceInput(client, s,
             RankData(c.name, team.members[team.me], c.dtype,
                      static_cast<size_t>(c.rows[team.me]) * row_elements),
             shape, c.arena);
  return s;
}

Submitted PrepareBroadcast(Client& client, const Team& team, const BroadcastCase& c) {
  Submitted s = Base(c.name, "broadcast", c.dtype, c.arena, c.out, c.shape);
  s.label += absl::StrCat(" from root ", c.root);
  const size_t count = Elements(c.shape);
  s.expected = RankData(c.name, team.members[c.root], c.dtype, count);
  s.expected_shape = c.shape;
  Bytes mine = RankData(c.name, team.members[team.me], c.dtype, count);
  if (c.out != Out::kInPlace) s.untouched = mine;
  PlaceInput(client, s, std::move(mine), c.shape, c.arena);
  PlaceOutput(s, c.out, s.expected.size());
  return s;
}

Submitted PrepareAlltoall(Client& client, const Team& team, const AlltoallCase& c) {
  const auto sent_rows = [&](int from) {
    return std::accumulate(c.splits[from].begin(), c.splits[from].end(), int64_t{0});
  };
  const std::vector<int64_t> shape = WithRows(sent_rows(team.me), c.trailing);
  Submitted s = Base(c.name, "alltoall", c.dtype, c.arena, Out::kView, shape);
  s.label += c.pass_splits
                 ? absl::StrCat(" with splits [", absl::StrJoin(c.splits[team.me], ", "), "]")
                 : " without splits";
  const size_t row_bytes = Elements(c.trailing) * ElementSize(c.dtype);
  std::vector<int64_t> received;
  for (int from = 0; from < team.size(); ++from) {
    const Bytes data = RankData(c.name, team.members[from], c.dtype,
                                static_cast<size_t>(sent_rows(from)) * Elements(c.trailing));
    const int64_t skip =
        std::accumulate(c.splits[from].begin(), c.splits[from].begin() + team.me, int64_t{0});
    const int64_t rows = c.splits[from][team.me];
    s.expected.insert(
        s.expected.end(),
        data.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(skip) * row_bytes),
        data.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(skip + rows) * row_bytes));
    received.push_back(rows);
  }
  s.expected_shape =
      WithRows(std::accumulate(received.begin(), received.end(), int64_t{0}), c.trailing);
  s.expected_splits = received;
  PlaceInput(client, s,
             RankData(c.name, team.members[team.me], c.dtype,
                      static_cast<size_t>(sent_rows(team.me)) * Elements(c.trailing)),
             shape, c.arena);
  return s;
}

Submitted SubmitAllreduce(Client& client, const Team& team, const ReduceCase& c) {
  Submitted s = PrepareAllreduce(client, team, c);
  Submitted1(s, client.AllreduceAsync(s.name, s.view, s.output, OptionsOf(team, c)));
  return s;
}

Submitted SubmitReducescatter(Client& client, const Team& team, const ReduceCase& c) {
  Submitted s = PrepareReducescatter(client, team, c);
  Submitted1(s, client.ReducescatterAsync(s.name, s.view, s.output, OptionsOf(team, c)));
  return s;
}

Submitted SubmitAllgather(Client& client, const Team& team, const GatherCase& c) {
  Submitted s = PrepareAllgather(client, team, c);
  Submitted1(s, client.AllgatherAsync(s.name, s.view, team.set));
  return s;
}

Submitted SubmitBroadcast(Client& client, const Team& team, const BroadcastCase& c) {
  Submitted s = PrepareBroadcast(client, team, c);
  Submitted1(s, client.BroadcastAsync(s.name, s.view, s.output, c.root, team.set));
  return s;
}

Submitted SubmitAlltoall(Client& client, const Team& team, const AlltoallCase& c) {
  Submitted s = PrepareAlltoall(client, team, c);
  const std::vector<int64_t> splits = c.pass_splits ? c.splits[team.me] : std::vector<int64_t>{};
  Submitted1(s, client.AlltoallAsync(s.name, s.view, splits, team.set));
  return s;
}

void Check(Client& client, Submitted& s) {
  absl::StatusOr<Result> result = client.Wait(s.handle);
  if (!result.ok()) Die(absl::StrCat(s.label, ": ", result.status().ToString()));
  if (result->bytes() != s.expected.size()) {
    Die(absl::StrCat(s.label, ": the result has ", result->bytes(), " bytes, expected ",
                     s.expected.size()));
  }
  if (result->shape() != s.expected_shape) {
    Die(absl::StrCat(s.label, ": the result's shape is [", absl::StrJoin(result->shape(), ", "),
                     "], expected [", absl::StrJoin(s.expected_shape, ", "), "]"));
  }
  if (result->dtype() != static_cast<DataType>(s.dtype)) {
    Die(absl::StrCat(s.label, ": the result's dtype is ", static_cast<int>(result->dtype())));
  }
  if (s.expected_splits.has_value() && result->received_splits() != *s.expected_splits) {
    Die(absl::StrCat(s.label, ": received splits [", absl::StrJoin(result->received_splits(), ", "),
                     "], expected [", absl::StrJoin(*s.expected_splits, ", "), "]"));
  }
  if (s.output != nullptr && result->data() != s.output) {
    Die(absl::StrCat(s.label, ": the result is not in the output buffer"));
  }
  const size_t count = s.expected.size() / ElementSize(s.dtype);
  const std::string difference =
      s.reduced && compare_closely
          ? CompareClose(s.dtype, s.expected.data(), result->data(), count)
          : CompareBitwise(s.dtype, s.expected.data(), result->data(), count);
  if (!difference.empty()) Die(absl::StrCat(s.label, ": ", difference));
  if (s.untouched.has_value()) {
    const std::string changed = CompareBitwise(s.dtype, s.untouched->data(), s.view.data,
                                               s.untouched->size() / ElementSize(s.dtype));
    if (!changed.empty()) Die(absl::StrCat(s.label, ": the input was written: ", changed));
  }
}

std::vector<std::vector<int64_t>> UnevenSplits(int size, int64_t base) {
  std::vector<std::vector<int64_t>> splits(size, std::vector<int64_t>(size, 0));
  for (int from = 0; from < size; ++from) {
    for (int to = 0; to < size; ++to) {
      const bool sends_nothing = size > 1 && from == 1;
      const bool receives_nothing = size > 2 && to == 2;
      splits[from][to] = sends_nothing || receives_nothing ? 0 : base + (from + 2 * to) % 3;
    }
  }
  return splits;
}

std::vector<std::vector<int64_t>> EvenSplits(int size, int64_t rows_each) {
  return std::vector<std::vector<int64_t>>(size, std::vector<int64_t>(size, rows_each));
}

void EveryCollective(Client& client, const Team& team, const std::string& tag) {
  const int m = team.size();
  std::vector<Submitted> checks;
  checks.push_back(
      SubmitAllreduce(client, team, {.name = tag + "sum", .shape = {33}, .out = Out::kCopy}));
  checks.push_back(SubmitAllreduce(client, team,
                                   {.name = tag + "average",
                                    .dtype = v1::DATA_TYPE_FLOAT64,
                                    .op = v1::REDUCE_OP_AVERAGE,
                                    .shape = {5, 2},
                                    .arena = true}));
  std::vector<int64_t> rows;
  for (int j = 0; j < m; ++j) rows.push_back(j + 1);
  checks.push_back(SubmitAllgather(
      client, team,
      {.name = tag + "allgather", .dtype = v1::DATA_TYPE_INT16, .rows = rows, .trailing = {2}}));
  for (int root = 0; root < m; ++root) {
    checks.push_back(SubmitBroadcast(client, team,
                                     {.name = absl::StrCat(tag, "broadcast.", root),
                                      .shape = {5},
                                      .root = root,
                                      .out = Out::kCopy}));
  }
  checks.push_back(SubmitAlltoall(
      client, team,
      {.name = tag + "alltoall", .dtype = v1::DATA_TYPE_INT64, .splits = UnevenSplits(m, 2)}));
  checks.push_back(SubmitReducescatter(
      client, team, {.name = tag + "reducescatter", .shape = {2 * m + 1}, .out = Out::kCopy}));
  for (Submitted& s : checks) Check(client, s);
  OkOrDie(client.Barrier(team.set), tag + "barrier");
}

}  // namespace collective::testing
