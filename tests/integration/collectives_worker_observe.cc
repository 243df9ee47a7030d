// What an operator observes: the stall inspector (a tensor the last rank
// never submits) and the timeline (a few named collectives recorded).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/collectives_checks.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {

// Every rank but the last submits 'stalled.tensor' and waits until the
// daemon gives up on it (stall_shutdown_seconds); the last rank waits until
// the daemon has failed it, without ever submitting it. Then every
// collective works.
int StallScenario(const Args& args) {
  auto client = ConnectOrDie(args);
  const int n = client->size();
  const std::string name = "stalled.tensor";
  if (client->rank() != n - 1) {
    std::vector<float> data(100, 1.0f);
    const absl::Status status =
        client->Allreduce(name, {data.data(), DataType::kFloat32, {100}}, data.data());
    if (status.ok()) Die("the stalled allreduce succeeded");
    Say(absl::StrCat("error: ", status.ToString()));
  } else {
    AwaitDaemon([&](const v1::StatusResponse& s) { return Pending(s, name, n - 1); },
                "the other ranks wait for the stalled tensor");
    AwaitDaemon([&](const v1::StatusResponse& s) { return !AnyPending(s, name); },
                "the stalled tensor failed");
  }
  EveryCollective(*client, GlobalTeam(*client), "after-stall.");
  Say("ok after the stall");
  return 0;
}

// A few named collectives, with copy-outs (allreduce and broadcast into
// output buffers). With --start FILE rank 0 records them through the client
// API (and --mark-cycles); otherwise the test records them with collectivectl.
int TimelineScenario(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  const std::string path = Flag(args, "--start");
  if (!path.empty() && client->rank() == 0) {
    OkOrDie(client->StartTimeline(path, HasFlag(args, "--mark-cycles")), "StartTimeline");
  }
  // Nobody submits before the recording started.
  OkOrDie(client->Barrier(), "barrier before");
  Submitted allreduce =
      SubmitAllreduce(*client, team, {.name = "tl.allreduce", .shape = {1000}, .out = Out::kCopy});
  Check(*client, allreduce);
  std::vector<int64_t> rows;
  for (int m = 0; m < team.size(); ++m) rows.push_back(m + 1);
  Submitted allgather = SubmitAllgather(
      *client, team,
      {.name = "tl.allgather", .dtype = v1::DATA_TYPE_INT32, .rows = rows, .trailing = {4}});
  Check(*client, allgather);
  Submitted broadcast = SubmitBroadcast(*client, team,
                                        {.name = "tl.broadcast",
                                         .dtype = v1::DATA_TYPE_FLOAT64,
                                         .shape = {77},
                                         .root = team.size() - 1,
                                         .out = Out::kCopy});
  Check(*client, broadcast);
  // The barrier's submission carries this rank's last copy-out span; once it
  // completes, the daemon has every rank's.
  OkOrDie(client->Barrier(), "barrier after");
  if (!path.empty() && client->rank() == 0) OkOrDie(client->StopTimeline(), "StopTimeline");
  Say("ok timeline");
  return 0;
}

}  // namespace collective::testing
