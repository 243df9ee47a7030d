// Training-loop shapes: the same tensors step after step (what the response
// cache of negotiation across nodes is for), and a loop that runs until the
// job fails (what the failure tests interrupt).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "tests/integration/collectives_checks.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {
namespace {

// Step `step`'s allreduces of `tensors` fixed names, all outstanding at
// once, checked.
void Step(Client& client, const Team& team, int tensors, int step, int changed_from) {
  std::vector<Submitted> checks;
  for (int t = 0; t < tensors; ++t) {
    // From step `changed_from` on, tensor 0 has another shape: its cached
    // negotiation no longer holds.
    const int64_t rows = t == 0 && changed_from >= 0 && step >= changed_from ? 9 : 5 + t;
    checks.push_back(SubmitAllreduce(client, team,
                                     {.name = absl::StrCat("step.tensor.", t),
                                      .op = v1::REDUCE_OP_AVERAGE,
                                      .shape = {rows, 4},
                                      .arena = t % 2 == 1,
                                      .out = t % 2 == 1 ? Out::kView : Out::kCopy}));
  }
  for (Submitted& s : checks) Check(client, s);
}

}  // namespace

// repeat [--steps S] [--tensors T] [--change-at K]: S steps of the same T
// allreduces (tensor 0 changes its shape from step K on).
int RepeatScenario(const Args& args) {
  auto client = ConnectOrDie(args);
  const Team team = GlobalTeam(*client);
  const int steps = std::stoi(Flag(args, "--steps", "5"));
  const int tensors = std::stoi(Flag(args, "--tensors", "8"));
  const int changed_from = std::stoi(Flag(args, "--change-at", "-1"));
  for (int step = 0; step < steps; ++step) Step(*client, team, tensors, step, changed_from);
  Say(absl::StrCat("ok ", steps, " steps of ", tensors, " tensors on rank ", client->rank()));
  return 0;
}

// lead [--steps S]: S steps of one small allreduce, which rank 0 submits
// first; it then sends every other rank a message, and they submit theirs
// once it has arrived. Across nodes, node 0's part of each step is then on
// its way to the other nodes before they announce theirs (they combine the
// parts themselves: cross_node_peer_parts).
int LeadScenario(const Args& args) {
  auto client = ConnectOrDie(args);
  const int steps = std::stoi(Flag(args, "--steps", "10"));
  const int rank = client->rank();
  const int size = client->size();
  for (int step = 0; step < steps; ++step) {
    std::vector<float> data = {static_cast<float>(rank), static_cast<float>(step), 1.0f, -2.0f};
    std::vector<float> sum(data.size());
    const TensorView view{data.data(), DataType::kFloat32, {static_cast<int64_t>(data.size())}};
    float token = static_cast<float>(step);
    const TensorView token_view{&token, DataType::kFloat32, {1}};
    if (rank == 0) {
      const Client::Handle handle =
          ValueOrDie(client->AllreduceAsync("lead", view, sum.data()), "allreduce");
      for (int peer = 1; peer < size; ++peer) {
        OkOrDie(client->Send(token_view, peer, step), "send to the other ranks");
      }
      OkOrDie(client->Wait(handle).status(), "allreduce");
    } else {
      OkOrDie(client->Recv(token_view, 0, step).status(), "receive rank 0's word");
      OkOrDie(client->Allreduce("lead", view, sum.data()), "allreduce");
    }
    const float n = static_cast<float>(size);
    const std::vector<float> expected = {n * (n - 1) / 2, n * static_cast<float>(step), n,
                                         -2.0f * n};
    if (sum != expected) {
      Die(absl::StrCat("step ", step, ": the sum is {", absl::StrJoin(sum, ", "), "}, not {",
                       absl::StrJoin(expected, ", "), "}"));
    }
  }
  Say(absl::StrCat("ok ", steps, " led steps on rank ", rank));
  return 0;
}

// loop [--elements N] [--name NAME]: allreduces of N floats (NAME.0 to
// NAME.3), step after step, until one fails (the test kills something);
// says how many steps ran and the error.
// Fails itself if nothing fails within its deadline.
int LoopScenario(const Args& args) {
  auto client = ConnectOrDie(args);
  const int64_t elements = std::stoll(Flag(args, "--elements", "262144"));
  const std::string name = Flag(args, "--name", "loop");
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  std::vector<float> data(static_cast<size_t>(elements), 1.0f);
  const TensorView view{data.data(), DataType::kFloat32, {elements}};
  for (int step = 0; absl::Now() < deadline; ++step) {
    const absl::Status status =
        client->Allreduce(absl::StrCat(name, ".", step % 4), view, data.data());
    if (!status.ok()) {
      Say(absl::StrCat("error after ", step, " steps: ", status.ToString()));
      return 0;
    }
    if (step == 10) Say("running");
    // Sums grow by the world size each step: keep them exact.
    std::fill(data.begin(), data.end(), 1.0f);
  }
  Die("no collective failed within 120 s");
}

}  // namespace collective::testing
