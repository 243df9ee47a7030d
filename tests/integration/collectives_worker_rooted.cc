// The rooted collectives (reduce, gather, scatter): every reduce op over
// several dtypes and sizes, every root, inputs in private memory and in the
// arena, results viewed, copied out and (reduce at the root) in place;
// gathers and scatters of uneven rows with ranks of no rows; then requests
// that disagree across ranks, which every rank must see fail with the same
// text before the job carries on. Every result is checked bitwise against
// the reference made from every rank's deterministic data.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "tests/common/reference_reduce.h"
#include "tests/integration/collectives_checks.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {
namespace {

using Bytes = std::vector<std::byte>;

// What a rank that receives nothing gets: no bytes, a first dimension of 0.
void ReceivesNothing(Submitted& s) {
  s.expected.clear();
  if (!s.expected_shape.empty()) s.expected_shape.front() = 0;
}

Submitted SubmitReduce(Client& client, const Team& team, const ReduceCase& c, int root) {
  // Allreduce's preparation computes the reduction and places input and
  // output; only the root keeps the result.
  Submitted s = PrepareAllreduce(client, team, c);
  s.label = absl::StrCat("reduce to ", root, s.label.substr(s.label.find(' ')));
  if (team.me != root) ReceivesNothing(s);
  s.handle = ValueOrDie(client.ReduceAsync(s.name, s.view, s.output, root,
                                           {.op = static_cast<ReduceOp>(c.op),
                                            .prescale = c.prescale,
                                            .postscale = c.postscale,
                                            .process_set = team.set}),
                        s.label + ": submit");
  return s;
}

// `to_output`: the root names a private output of every rank's rows.
Submitted SubmitGather(Client& client, const Team& team, const GatherCase& c, int root,
                       bool to_output) {
  Submitted s = PrepareAllgather(client, team, c);
  s.label = absl::StrCat("gather to ", root, to_output ? " into an output" : "",
                         s.label.substr(s.label.find(' ')));
  if (team.me != root) ReceivesNothing(s);
  if (team.me == root && to_output) {
    s.output_buffer.assign(std::max<size_t>(s.expected.size(), 1), std::byte{0x5a});
    s.output = s.output_buffer.data();
  }
  s.handle = ValueOrDie(client.GatherAsync(s.name, s.view, root, team.set, s.output,
                                           s.output == nullptr ? 0 : s.output_buffer.size()),
                        s.label + ": submit");
  return s;
}

struct ScatterCase {
  std::string name;
  v1::DataType dtype = v1::DATA_TYPE_FLOAT32;
  std::vector<int64_t> rows;  // received, by set rank
  std::vector<int64_t> trailing;
  int root = 0;
  bool arena = false;  // the input and, when `out` is kCopy, the output
  Out out = Out::kView;
};

Submitted SubmitScatter(Client& client, const Team& team, const ScatterCase& c) {
  Submitted s;
  s.name = c.name;
  s.dtype = c.dtype;
  s.label = absl::StrCat("scatter '", c.name, "' from ", c.root, " (", DataTypeName(c.dtype),
                         c.arena ? ", arena" : ", private",
                         c.out == Out::kView ? ", view)" : ", output)");
  size_t row_elements = 1;
  for (int64_t dim : c.trailing) row_elements *= static_cast<size_t>(dim);
  const size_t row_bytes = row_elements * ElementSize(c.dtype);
  const int64_t total = std::accumulate(c.rows.begin(), c.rows.end(), int64_t{0});
  const int64_t before = std::accumulate(c.rows.begin(), c.rows.begin() + team.me, int64_t{0});
  const Bytes all =
      RankData(c.name, team.members[c.root], c.dtype, static_cast<size_t>(total) * row_elements);
  s.expected.assign(all.begin() + static_cast<ptrdiff_t>(before * row_bytes),
                    all.begin() + static_cast<ptrdiff_t>((before + c.rows[team.me]) * row_bytes));
  s.expected_shape = {c.rows[team.me]};
  s.expected_shape.insert(s.expected_shape.end(), c.trailing.begin(), c.trailing.end());
  // The root sends every row; the others an empty tensor of the same
  // trailing dimensions.
  const bool root = team.me == c.root;
  std::vector<int64_t> shape = {root ? total : 0};
  shape.insert(shape.end(), c.trailing.begin(), c.trailing.end());
  const Bytes input = root ? all : Bytes();
  const size_t capacity = c.out == Out::kView ? 0 : std::max<size_t>(s.expected.size(), 1);
  // In the arena: the input, then (when there is one) the output, which
  // the daemon then writes itself.
  const size_t output_at = (input.size() + 63) / 64 * 64;
  if (c.arena && output_at + capacity > 0) {
    s.arena_input = ValueOrDie(client.Allocate(output_at + capacity), s.label + ": allocate");
    if (!input.empty()) std::memcpy(s.arena_input.data(), input.data(), input.size());
    s.view = TensorView{s.arena_input.data(), static_cast<DataType>(c.dtype), shape};
    if (capacity > 0) s.output = static_cast<std::byte*>(s.arena_input.data()) + output_at;
  } else {
    s.private_input = input;
    s.view = TensorView{s.private_input.data(), static_cast<DataType>(c.dtype), shape};
    if (capacity > 0) {
      s.output_buffer.assign(capacity, std::byte{0x5a});
      s.output = s.output_buffer.data();
    }
  }
  s.handle = ValueOrDie(
      client.ScatterAsync(s.name, s.view, c.rows[team.me], c.root, team.set, s.output, capacity),
      s.label + ": submit");
  return s;
}

void Done(const Client& client, int cases) {
  Say(absl::StrCat("ok ", cases, " rooted cases on rank ", client.rank(), " of ", client.size()));
}

}  // namespace

int RootedMatrix(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  const int n = team.size();
  // --only reduce|gather|scatter: that collective's cases alone.
  const std::string only = Flag(args, "--only", "");
  const auto runs = [&](const char* collective) { return only.empty() || only == collective; };
  int cases = 0;
  // Reduce: every op over dtypes that take it, sizes of the matrix, the
  // root moving on with every case, every placement in turn.
  const Out outs[] = {Out::kCopy, Out::kView, Out::kInPlace, Out::kInPlace};
  for (v1::ReduceOp op : {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MIN,
                          v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT}) {
    if (!runs("reduce")) break;
    for (v1::DataType dtype :
         {v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_FLOAT64, v1::DATA_TYPE_INT32, v1::DATA_TYPE_UINT8,
          v1::DATA_TYPE_BFLOAT16, v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_INT64}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}}) {
        const int root = cases % n;
        const Out out = outs[cases % 4];
        // The last in-place form has its input (and output) in the arena:
        // the daemon writes the root's result there in the reducing pass.
        const bool arena = out == Out::kView || (out == Out::kInPlace && cases % 8 >= 4);
        const bool scaled = op != v1::REDUCE_OP_MIN && op != v1::REDUCE_OP_MAX && cases % 3 == 1;
        ReduceCase c{.name = absl::StrCat("rd.", ReduceOpName(op), ".", DataTypeName(dtype), ".",
                                          count, ".", cases),
                     .dtype = dtype,
                     .op = op,
                     .prescale = scaled ? 2.0 : 1.0,
                     .postscale = scaled ? 0.5 : 1.0,
                     .shape = {static_cast<int64_t>(count)},
                     .arena = arena,
                     .out = out};
        Submitted s = SubmitReduce(*client, team, c, root);
        Check(*client, s);
        ++cases;
      }
    }
  }
  // Bool takes min and max; every root once more with rows of three.
  for (int root = 0; root < n && runs("reduce"); ++root) {
    for (v1::ReduceOp op : {v1::REDUCE_OP_MIN, v1::REDUCE_OP_MAX}) {
      ReduceCase c{.name = absl::StrCat("rd.bool.", ReduceOpName(op), ".", root),
                   .dtype = v1::DATA_TYPE_BOOL,
                   .op = op,
                   .shape = {5, 3},
                   .out = Out::kCopy};
      Submitted s = SubmitReduce(*client, team, c, root);
      Check(*client, s);
      ++cases;
    }
  }
  // Gather: uneven rows (set rank 1 sends none), every root, viewed and
  // into an output at the root.
  for (int root = 0; root < n && runs("gather"); ++root) {
    for (v1::DataType dtype : {v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_INT16, v1::DATA_TYPE_FLOAT64}) {
      for (bool to_output : {false, true}) {
        std::vector<int64_t> rows;
        for (int m = 0; m < n; ++m) rows.push_back(m == 1 ? 0 : 3 + m + root);
        GatherCase c{.name = absl::StrCat("ga.", DataTypeName(dtype), ".", root, ".", to_output),
                     .dtype = dtype,
                     .rows = rows,
                     .trailing = {2, 3},
                     .arena = (cases % 2) == 1};
        Submitted s = SubmitGather(*client, team, c, root, to_output);
        Check(*client, s);
        ++cases;
      }
    }
  }
  // Scatter: uneven rows with a rank of none (set rank n-1 gets none when
  // n > 2), every root, viewed, copied out and into arena outputs.
  for (int root = 0; root < n && runs("scatter"); ++root) {
    for (v1::DataType dtype : {v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_UINT8, v1::DATA_TYPE_INT64}) {
      for (int placement = 0; placement < 3; ++placement) {
        std::vector<int64_t> rows;
        for (int m = 0; m < n; ++m) rows.push_back(n > 2 && m == n - 1 ? 0 : 1 + (m + root) % 3);
        ScatterCase c{.name = absl::StrCat("sc.", DataTypeName(dtype), ".", root, ".", placement),
                      .dtype = dtype,
                      .rows = rows,
                      .trailing = {4},
                      .root = root,
                      .arena = placement != 1,
                      .out = placement == 0 ? Out::kView : Out::kCopy};
        Submitted s = SubmitScatter(*client, team, c);
        Check(*client, s);
        ++cases;
      }
    }
  }
  // A scatter larger than a piece of work (4 MiB) in all.
  ScatterCase big{.name = "sc.big",
                  .dtype = v1::DATA_TYPE_FLOAT32,
                  .rows = std::vector<int64_t>(static_cast<size_t>(n), (5 << 20) / 16 / n),
                  .trailing = {4},
                  .root = n - 1,
                  .arena = true,
                  .out = Out::kCopy};
  if (runs("scatter")) {
    Submitted s = SubmitScatter(*client, team, big);
    Check(*client, s);
    ++cases;
  }
  Done(*client, cases);
  return 0;
}

// --kind root|dtype|rows: the last rank disagrees (a reduce's root, a
// gather's dtype, a scatter's rows); every rank prints the error it got,
// then the job runs a reduce, a gather and a scatter correctly.
int RootedMismatch(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  const int n = team.size();
  const bool odd = team.me == n - 1;
  const std::string kind = Flag(args, "--kind");
  std::vector<float> data(64, 1.0f);
  std::vector<float> out(64);
  absl::StatusOr<Client::Handle> handle;
  if (kind == "root") {
    handle = client->ReduceAsync("bad", TensorView{data.data(), DataType::kFloat32, {8}},
                                 out.data(), odd ? 1 : 0);
  } else if (kind == "dtype") {
    handle = client->GatherAsync(
        "bad", TensorView{data.data(), odd ? DataType::kInt32 : DataType::kFloat32, {2, 2}}, 0);
  } else if (kind == "rows") {
    // Root 0 sends 2·n rows; every rank asks for 2, the last one for 3.
    const int64_t rows = team.me == 0 ? 2 * n : 0;
    handle = client->ScatterAsync("bad", TensorView{data.data(), DataType::kFloat32, {rows, 2}},
                                  odd ? 3 : 2, 0, kGlobalProcessSet, out.data(),
                                  out.size() * sizeof(float));
  } else {
    Die("unknown --kind " + kind);
  }
  const absl::Status status = client->Wait(ValueOrDie(std::move(handle), "submit")).status();
  if (status.ok()) Die("the mismatched 'bad' succeeded");
  Say(absl::StrCat("error: ", status.ToString()));
  // The job goes on.
  std::vector<Submitted> checks;
  checks.push_back(SubmitReduce(*client, team,
                                {.name = "after.reduce", .shape = {9}, .out = Out::kCopy}, n - 1));
  std::vector<int64_t> rows;
  for (int m = 0; m < n; ++m) rows.push_back(m);
  checks.push_back(SubmitGather(*client, team,
                                {.name = "after.gather", .rows = rows, .trailing = {2}}, 0, false));
  checks.push_back(SubmitScatter(
      *client, team, {.name = "after.scatter", .rows = rows, .trailing = {2}, .root = n - 1}));
  for (Submitted& s : checks) Check(*client, s);
  return 0;
}

}  // namespace collective::testing
