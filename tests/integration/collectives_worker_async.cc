// Grouped collectives (several tensors negotiated and run together, which
// the daemon fuses) and many requests of mixed collectives outstanding at
// once, waited for in reverse order.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/collectives_checks.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {
namespace {

struct GroupCall {
  std::vector<std::string> names;
  std::vector<TensorView> views;
  std::vector<void*> outputs;
};

GroupCall CallOf(const std::vector<Submitted>& group) {
  GroupCall call;
  for (const Submitted& s : group) {
    call.names.push_back(s.name);
    call.views.push_back(s.view);
    call.outputs.push_back(s.output);
  }
  return call;
}

void SetHandles(std::vector<Submitted>& group, absl::StatusOr<std::vector<Client::Handle>> handles,
                const std::string& what) {
  const std::vector<Client::Handle> ids = ValueOrDie(std::move(handles), what);
  if (ids.size() != group.size()) Die(absl::StrCat(what, ": ", ids.size(), " handles"));
  for (size_t i = 0; i < ids.size(); ++i) group[i].handle = ids[i];
}

void CheckAll(Client& client, std::vector<Submitted>& group) {
  for (Submitted& s : group) Check(client, s);
}

// Tensors of one allreduce group share its options.
void GroupedAllreduce(Client& client, const Team& team, int round, v1::DataType dtype,
                      const std::vector<int64_t>& counts, v1::ReduceOp op, double prescale) {
  std::vector<Submitted> group;
  for (size_t i = 0; i < counts.size(); ++i) {
    group.push_back(PrepareAllreduce(
        client, team,
        {.name = absl::StrCat("gar.", round, ".", static_cast<int>(dtype), ".", i),
         .dtype = dtype,
         .op = op,
         .prescale = prescale,
         .shape = {counts[i]},
         .arena = i % 3 == 2,
         .out = i % 2 == 0 ? Out::kCopy : (i % 3 == 2 ? Out::kView : Out::kInPlace)}));
  }
  const GroupCall call = CallOf(group);
  SetHandles(group,
             client.GroupedAllreduceAsync(
                 call.names, call.views, call.outputs,
                 {.op = static_cast<ReduceOp>(op), .prescale = prescale, .process_set = team.set}),
             "grouped allreduce");
  CheckAll(client, group);
}

}  // namespace

int Grouped(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  const int n = team.size();
  int tensors = 0;
  for (int round = 0; round < 3; ++round) {
    const std::vector<int64_t> counts = {0, 1, 7, 300, 4096 + 3};
    GroupedAllreduce(*client, team, round, v1::DATA_TYPE_FLOAT32, counts, v1::REDUCE_OP_AVERAGE,
                     1.0);
    GroupedAllreduce(*client, team, round, v1::DATA_TYPE_INT32, counts, v1::REDUCE_OP_SUM, 0.5);
    GroupedAllreduce(*client, team, round, v1::DATA_TYPE_BFLOAT16, {5, 64}, v1::REDUCE_OP_MAX, 1.0);
    tensors += 12;

    std::vector<Submitted> gathers;
    for (int i = 0; i < 4; ++i) {
      std::vector<int64_t> rows;
      for (int m = 0; m < n; ++m) rows.push_back((m + i + round) % 3);
      gathers.push_back(PrepareAllgather(*client, team,
                                         {.name = absl::StrCat("gag.", round, ".", i),
                                          .dtype = v1::DATA_TYPE_INT16,
                                          .rows = rows,
                                          .trailing = {5},
                                          .arena = i % 2 == 1}));
    }
    const GroupCall gather_call = CallOf(gathers);
    SetHandles(gathers,
               client->GroupedAllgatherAsync(gather_call.names, gather_call.views, team.set),
               "grouped allgather");
    CheckAll(*client, gathers);
    tensors += 4;

    std::vector<Submitted> scatters;
    const std::vector<int64_t> rows = {2 * n + 1, n, 1, 0};
    for (size_t i = 0; i < rows.size(); ++i) {
      scatters.push_back(PrepareReducescatter(*client, team,
                                              {.name = absl::StrCat("grs.", round, ".", i),
                                               .dtype = v1::DATA_TYPE_FLOAT64,
                                               .op = v1::REDUCE_OP_SUM,
                                               .postscale = 2.0,
                                               .shape = {rows[i], 3},
                                               .arena = i % 2 == 1,
                                               .out = i % 2 == 1 ? Out::kView : Out::kCopy}));
    }
    const GroupCall scatter_call = CallOf(scatters);
    SetHandles(scatters,
               client->GroupedReducescatterAsync(
                   scatter_call.names, scatter_call.views, scatter_call.outputs,
                   {.op = ReduceOp::kSum, .postscale = 2.0, .process_set = team.set}),
               "grouped reducescatter");
    CheckAll(*client, scatters);
    tensors += 4;
  }
  Say(absl::StrCat("ok ", tensors, " grouped tensors on rank ", client->rank(), " of ", n));
  return 0;
}

int MixedAsync(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  const int n = team.size();
  const std::vector<v1::DataType> dtypes = AllDataTypes();
  const std::vector<v1::DataType> numeric = NumericDataTypes();
  const v1::ReduceOp ops[] = {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MIN,
                              v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT};
  const Out outs[] = {Out::kCopy, Out::kView, Out::kInPlace};
  std::vector<Submitted> all;
  constexpr int kRequests = 60;
  for (int i = 0; i < kRequests; ++i) {
    const std::string name = absl::StrCat("mixed.", i);
    const bool arena = (i / 6) % 2 == 1;
    const auto size = static_cast<int64_t>(1 + (i * 37) % 700);
    switch (i % 6) {
      case 0:
        all.push_back(SubmitAllreduce(*client, team,
                                      {.name = name,
                                       .dtype = numeric[static_cast<size_t>(i / 6) % 10],
                                       .op = ops[(i / 6) % 5],
                                       .shape = {size},
                                       .arena = arena,
                                       .out = outs[(i / 6) % 3]}));
        break;
      case 1: {
        std::vector<int64_t> rows;
        for (int m = 0; m < n; ++m) rows.push_back((i + 2 * m) % 5);
        all.push_back(SubmitAllgather(*client, team,
                                      {.name = name,
                                       .dtype = dtypes[static_cast<size_t>(i / 6) % 11],
                                       .rows = rows,
                                       .trailing = {2},
                                       .arena = arena}));
        break;
      }
      case 2:
        all.push_back(SubmitBroadcast(*client, team,
                                      {.name = name,
                                       .dtype = dtypes[static_cast<size_t>(i / 6 + 3) % 11],
                                       .shape = {size},
                                       .root = (i / 6) % n,
                                       .arena = arena,
                                       .out = outs[(i / 6 + 1) % 3]}));
        break;
      case 3:
        all.push_back(SubmitAlltoall(
            *client, team,
            {.name = name,
             .dtype = dtypes[static_cast<size_t>(i / 6 + 5) % 11],
             .splits = (i / 6) % 2 == 0 ? UnevenSplits(n, (i / 6) % 4) : EvenSplits(n, i % 4),
             .trailing = {3},
             .pass_splits = (i / 6) % 2 == 0,
             .arena = arena}));
        break;
      case 4:
        all.push_back(
            SubmitReducescatter(*client, team,
                                {.name = name,
                                 .dtype = numeric[static_cast<size_t>(i / 6 + 2) % 10],
                                 .op = (i / 6) % 2 == 0 ? v1::REDUCE_OP_SUM : v1::REDUCE_OP_AVERAGE,
                                 .shape = {2 * n + (i / 6) % 3, 4},
                                 .arena = arena,
                                 .out = arena ? Out::kView : Out::kCopy}));
        break;
      default:
        all.push_back(
            SubmitAllreduce(*client, team,
                            {.name = name,
                             .dtype = v1::DATA_TYPE_BOOL,
                             .op = (i / 6) % 2 == 0 ? v1::REDUCE_OP_MAX : v1::REDUCE_OP_MIN,
                             .shape = {size},
                             .arena = arena,
                             .out = Out::kCopy}));
        break;
    }
  }
  for (auto it = all.rbegin(); it != all.rend(); ++it) Check(*client, *it);
  Say(absl::StrCat("ok ", kRequests, " outstanding requests on rank ", client->rank(), " of ", n));
  return 0;
}

}  // namespace collective::testing
