// A known workload, for the tests that count what the daemon reports doing
// (metrics, the job's summary line): the operations named by --ops, one
// after the other, each checked.
//
//   --ops "KIND:DTYPE:COUNT:TIMES,..."
//     allreduce, allgather, broadcast, alltoall, reducescatter: TIMES
//       collectives of COUNT elements per rank (alltoall: COUNT divisible by
//       the number of ranks), checked bitwise;
//     grouped: one group of TIMES allreduces of COUNT elements, which the
//       daemon fuses into one batch;
//     mismatch: TIMES allreduces whose last rank sends float64 instead of
//       DTYPE, which fail on every rank;
//     barrier: TIMES barriers (DTYPE and COUNT unused).
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/integration/collectives_checks.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {
namespace {

struct Op {
  std::string kind;
  v1::DataType dtype = v1::DATA_TYPE_UNSPECIFIED;
  int64_t count = 0;
  int times = 0;
};

std::vector<Op> ParseOps(const std::string& text) {
  std::vector<Op> ops;
  for (absl::string_view spec : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const std::vector<std::string> parts = absl::StrSplit(spec, ':');
    Op op;
    if (parts.size() != 4 || !absl::SimpleAtoi(parts[2], &op.count) ||
        !absl::SimpleAtoi(parts[3], &op.times)) {
      Die(absl::StrCat("bad op '", spec, "': want KIND:DTYPE:COUNT:TIMES"));
    }
    op.kind = parts[0];
    if (op.kind != "barrier" &&
        !v1::DataType_Parse(absl::StrCat("DATA_TYPE_", absl::AsciiStrToUpper(parts[1])),
                            &op.dtype)) {
      Die(absl::StrCat("bad dtype in '", spec, "'"));
    }
    ops.push_back(op);
  }
  return ops;
}

// One checked collective of `op`, named `name`.
void RunOne(Client& client, const Team& team, const Op& op, const std::string& name) {
  const std::vector<int64_t> shape = {op.count};
  Submitted submitted;
  if (op.kind == "allreduce") {
    submitted = SubmitAllreduce(client, team, {.name = name, .dtype = op.dtype, .shape = shape});
  } else if (op.kind == "reducescatter") {
    submitted =
        SubmitReducescatter(client, team, {.name = name, .dtype = op.dtype, .shape = shape});
  } else if (op.kind == "allgather") {
    submitted = SubmitAllgather(
        client, team,
        {.name = name, .dtype = op.dtype, .rows = std::vector<int64_t>(team.size(), op.count)});
  } else if (op.kind == "broadcast") {
    submitted = SubmitBroadcast(client, team, {.name = name, .dtype = op.dtype, .shape = shape});
  } else if (op.kind == "alltoall") {
    submitted = SubmitAlltoall(client, team,
                               {.name = name,
                                .dtype = op.dtype,
                                .splits = EvenSplits(team.size(), op.count / team.size())});
  } else {
    Die(absl::StrCat("unknown op kind '", op.kind, "'"));
  }
  Check(client, submitted);
}

void RunGroup(Client& client, const Team& team, const Op& op, const std::string& name) {
  std::vector<Submitted> group;
  std::vector<std::string> names;
  std::vector<TensorView> views;
  std::vector<void*> outputs;
  for (int i = 0; i < op.times; ++i) {
    group.push_back(PrepareAllreduce(
        client, team,
        {.name = absl::StrCat(name, ".", i), .dtype = op.dtype, .shape = {op.count}}));
    names.push_back(group.back().name);
    views.push_back(group.back().view);
    outputs.push_back(group.back().output);
  }
  const std::vector<Client::Handle> handles =
      ValueOrDie(client.GroupedAllreduceAsync(names, views, outputs), "grouped allreduce");
  for (size_t i = 0; i < group.size(); ++i) {
    group[i].handle = handles[i];
    Check(client, group[i]);
  }
}

void RunMismatch(Client& client, const Op& op, const std::string& name) {
  const bool odd = client.rank() == client.size() - 1;
  std::vector<double> data(static_cast<size_t>(op.count), 1.0);
  const TensorView view{
      data.data(), odd ? DataType::kFloat64 : static_cast<DataType>(op.dtype), {op.count}};
  const absl::Status status = client.Allreduce(name, view, data.data());
  if (status.ok()) Die(absl::StrCat("the mismatched '", name, "' succeeded"));
  Say(absl::StrCat("error: ", status.ToString()));
}

}  // namespace

int WorkloadScenario(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  const std::vector<Op> ops = ParseOps(Flag(args, "--ops"));
  for (size_t o = 0; o < ops.size(); ++o) {
    const Op& op = ops[o];
    const std::string name = absl::StrCat("wl.", o, ".", op.kind);
    if (op.kind == "grouped") {
      RunGroup(*client, team, op, name);
      continue;
    }
    for (int t = 0; t < op.times; ++t) {
      const std::string each = absl::StrCat(name, ".", t);
      if (op.kind == "barrier") {
        OkOrDie(client->Barrier(), each);
      } else if (op.kind == "mismatch") {
        RunMismatch(*client, op, each);
      } else {
        RunOne(*client, team, op, each);
      }
    }
  }
  Say("ok workload");
  return 0;
}

}  // namespace collective::testing
