// Barrier and join (Horovod's semantics). Ranks are sequenced through the
// daemon's Status (a barrier seen waiting, joined_ranks), never by sleeping:
// a rank that must come last waits until the daemon shows the others
// blocked.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "tests/integration/collectives_checks.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {
namespace {

// The name under which the daemon lists a pending barrier.
constexpr char kBarrierName[] = "__collective__.barrier";

bool HasJoined(const v1::StatusResponse& status, int rank) {
  return std::find(status.joined_ranks().begin(), status.joined_ranks().end(), rank) !=
         status.joined_ranks().end();
}

// Barriers in `team`, each entered last by another member: it waits until
// the daemon shows every other member blocked in the barrier, which they
// must not leave before it arrives.
int Barriers(Client& client, const Team& team) {
  const int m = team.size();
  for (int round = 0; round < m; ++round) {
    if (team.me == round && m > 1) {
      AwaitDaemon(
          [&](const v1::StatusResponse& s) { return Pending(s, kBarrierName, m - 1, team.set); },
          absl::StrCat("every member of set ", team.set, " but ", round, " in the barrier"));
    }
    OkOrDie(client.Barrier(team.set), absl::StrCat("barrier ", round, " of set ", team.set));
  }
  return m;
}

// Allreduces while `early` has joined: its contribution is zeros, and the
// average still divides by the full size.
int AllreducesWithJoinedRank(Client& client, const Team& team, int early) {
  const v1::DataType dtypes[] = {
      v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_FLOAT64, v1::DATA_TYPE_INT32,   v1::DATA_TYPE_INT8,
      v1::DATA_TYPE_UINT16,  v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16};
  const v1::ReduceOp ops[] = {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MAX};
  const int64_t counts[] = {1, 7, 4096 + 3};
  int cases = 0;
  for (v1::DataType dtype : dtypes) {
    for (v1::ReduceOp op : ops) {
      const bool scaled = cases % 4 == 3;
      Submitted s = SubmitAllreduce(
          client, team,
          {.name = absl::StrCat("joined.", DataTypeName(dtype), ".", ReduceOpName(op)),
           .dtype = dtype,
           .op = op,
           .prescale = scaled ? 0.5 : 1.0,
           .postscale = scaled ? 3.0 : 1.0,
           .shape = {counts[cases % 3]},
           .arena = cases % 2 == 1,
           .out = cases % 2 == 1 ? Out::kView : Out::kCopy,
           .zero_members = {early}});
      Check(client, s);
      ++cases;
    }
  }
  Submitted flags = SubmitAllreduce(client, team,
                                    {.name = "joined.bool.max",
                                     .dtype = v1::DATA_TYPE_BOOL,
                                     .op = v1::REDUCE_OP_MAX,
                                     .shape = {7},
                                     .out = Out::kCopy,
                                     .zero_members = {early}});
  Check(client, flags);
  return cases + 1;
}

void ExpectFailure(const std::string& label, const absl::Status& status) {
  if (status.ok()) Die(label + " succeeded while a rank had joined");
  Say(absl::StrCat(label, ": ", status.ToString()));
}

// Everything but allreduce fails while a rank has joined.
void OthersFailWhileJoined(Client& client, const Team& team) {
  const int n = team.size();
  std::vector<float> data(static_cast<size_t>(2 * n), 1.0f);
  std::vector<float> out(data.size());
  const TensorView view{data.data(), DataType::kFloat32, {2 * n}};
  const auto wait = [&](absl::StatusOr<Client::Handle> handle) {
    if (!handle.ok()) return handle.status();
    return client.Wait(*handle).status();
  };
  ExpectFailure("allgather", wait(client.AllgatherAsync("join.allgather", view)));
  ExpectFailure("broadcast", wait(client.BroadcastAsync("join.broadcast", view, out.data(), 1)));
  ExpectFailure("alltoall", wait(client.AlltoallAsync("join.alltoall", view)));
  ExpectFailure("reducescatter",
                wait(client.ReducescatterAsync("join.reducescatter", view, out.data())));
  ExpectFailure("barrier", client.Barrier());
}

}  // namespace

int BarrierScenario(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team global = GlobalTeam(*client);
  int barriers = Barriers(*client, global);
  if (client->size() >= 2) {
    // In a set without rank 0, which meanwhile waits in a global barrier.
    std::vector<int> ranks(global.members.begin() + 1, global.members.end());
    const ProcessSet set = ValueOrDie(client->AddProcessSet(ranks), "add the set");
    if (set.included(client->rank())) barriers += Barriers(*client, TeamOf(*client, set));
    OkOrDie(client->Barrier(), "the global barrier after the set's");
    ++barriers;
  }
  Say(absl::StrCat("ok ", barriers, " barriers"));
  return 0;
}

int JoinScenario(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  const int n = team.size();
  const int me = client->rank();
  const int early = std::stoi(Flag(args, "--early", "0"));
  const int last = std::stoi(Flag(args, "--last", std::to_string(n - 1)));
  if (n > 1 && (early == last || early >= n || last >= n)) Die("bad --early/--last");

  if (me != early || n == 1) {
    if (n > 1) {
      AwaitDaemon([&](const v1::StatusResponse& s) { return HasJoined(s, early); },
                  absl::StrCat("rank ", early, " joined"));
      const int cases = AllreducesWithJoinedRank(*client, team, early);
      Say(absl::StrCat("ok ", cases, " allreduces with rank ", early, " joined"));
      OthersFailWhileJoined(*client, team);
    }
    if (me == last && n > 1) {
      // Last: only once every other rank's join is pending.
      AwaitDaemon([&](const v1::StatusResponse& s) { return s.joined_ranks_size() == n - 1; },
                  "every rank but the last joined");
    }
  }
  const int returned = ValueOrDie(client->Join(), "join");
  Say(absl::StrCat("join returned ", returned));
  // The job goes on as before, with every rank.
  EveryCollective(*client, team, "after-join.");
  const v1::StatusResponse status = ValueOrDie(DaemonStatus(), "status");
  if (status.joined_ranks_size() != 0) {
    Die(absl::StrCat("ranks still listed as joined: ", absl::StrJoin(status.joined_ranks(), ", ")));
  }
  Say("ok after join");
  return 0;
}

}  // namespace collective::testing
