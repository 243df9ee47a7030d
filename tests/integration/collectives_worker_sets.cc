// Process sets: static sets given at registration, sets added and removed at
// run time (ids reused smallest first), the per-set queries, every
// collective run within a set while the ranks outside it are busy with
// collectives of their own, and the errors refused at the call.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/collectives_checks.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {
namespace {

std::string Describe(const ProcessSet& set) {
  return absl::StrCat(set.id, " [", absl::StrJoin(set.ranks, ", "), "]");
}

std::vector<int> Sorted(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// The ranks in an order of this rank's own: every rank lists the same set
// differently, and the daemon must take them as one set.
std::vector<int> Shuffled(std::vector<int> ranks, int me) {
  std::rotate(ranks.begin(), ranks.begin() + me % static_cast<int>(ranks.size()), ranks.end());
  if (me % 2 == 1) std::reverse(ranks.begin(), ranks.end());
  return ranks;
}

void ExpectSets(const Client& client, const std::vector<ProcessSet>& expected) {
  const std::vector<ProcessSet> sets = client.ProcessSets();
  std::vector<std::string> got, want;
  for (const ProcessSet& set : sets) got.push_back(Describe(set));
  for (const ProcessSet& set : expected) want.push_back(Describe(set));
  if (got != want) {
    Die(absl::StrCat("process sets {", absl::StrJoin(got, "; "), "}, expected {",
                     absl::StrJoin(want, "; "), "}"));
  }
}

// ProcessSetRank/Size/Included of `set` agree with its ranks.
void CheckQueries(const Client& client, const ProcessSet& set) {
  const std::string what = absl::StrCat("process set ", Describe(set));
  if (ValueOrDie(client.ProcessSetSize(set.id), what + ": size") != set.size()) {
    Die(what + ": wrong size");
  }
  const bool member =
      std::find(set.ranks.begin(), set.ranks.end(), client.rank()) != set.ranks.end();
  if (ValueOrDie(client.ProcessSetIncluded(set.id), what + ": included") != member) {
    Die(what + ": wrong membership");
  }
  const absl::StatusOr<int> rank = client.ProcessSetRank(set.id);
  if (member) {
    const int expected = static_cast<int>(
        std::find(set.ranks.begin(), set.ranks.end(), client.rank()) - set.ranks.begin());
    if (ValueOrDie(rank, what + ": rank") != expected) Die(what + ": wrong rank");
  } else if (rank.ok() || rank.status().code() != absl::StatusCode::kInvalidArgument) {
    Die(absl::StrCat(what, ": the rank of a non-member: ", rank.status().ToString()));
  }
}

ProcessSet Find(const Client& client, int32_t id) {
  for (const ProcessSet& set : client.ProcessSets()) {
    if (set.id == id) return set;
  }
  Die(absl::StrCat("no process set ", id));
}

// Every collective within `set`, checked against its members' data alone.
void SetSuite(Client& client, const ProcessSet& set) {
  if (!set.included(client.rank())) return;
  EveryCollective(client, TeamOf(client, set), absl::StrCat("set", set.id, "."));
}

void SuiteOnEverySet(Client& client) {
  for (const ProcessSet& set : client.ProcessSets()) SetSuite(client, set);
}

// Prints "LABEL: STATUS" for a call that must fail with INVALID_ARGUMENT.
void Refused(const std::string& label, const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    Die(absl::StrCat(label, ": expected INVALID_ARGUMENT, got ", status.ToString()));
  }
  Say(absl::StrCat(label, ": ", status.ToString()));
}

template <typename T>
void Refused(const std::string& label, const absl::StatusOr<T>& value) {
  Refused(label, value.status());
}

}  // namespace

int StaticSets(const Args& args) {
  const std::vector<std::vector<int>> asked = ParseSets(Flag(args, "--static-sets"));
  if (HasFlag(args, "--connect-fails")) {
    const auto client = Client::Connect({.static_process_sets = asked});
    if (client.ok()) Die("Connect succeeded");
    Say(absl::StrCat("connect: ", client.status().ToString()));
    return 0;
  }
  auto client = ConnectOrDie(args);
  std::vector<ProcessSet> expected = {{.id = 0, .ranks = GlobalTeam(*client).members}};
  for (size_t i = 0; i < asked.size(); ++i) {
    expected.push_back({.id = static_cast<int32_t>(i + 1), .ranks = Sorted(asked[i])});
  }
  ExpectSets(*client, expected);
  for (const ProcessSet& set : expected) CheckQueries(*client, set);
  // Ascending ids on every rank: ranks in several sets cannot deadlock.
  SuiteOnEverySet(*client);

  // Set 1 removed, a set added: it takes id 1 again, the smallest free.
  OkOrDie(client->RemoveProcessSet(1), "remove process set 1");
  Refused("size of a removed set", client->ProcessSetSize(1));
  const ProcessSet again = ValueOrDie(client->AddProcessSet(asked[0]), "add the set again");
  if (again.id != 1 || again.ranks != Sorted(asked[0])) {
    Die(absl::StrCat("re-added set is ", Describe(again)));
  }
  ExpectSets(*client, expected);
  SetSuite(*client, Find(*client, 1));
  // A rank that leaves ends the job: nobody leaves before everybody is done.
  OkOrDie(client->Barrier(), "final barrier");
  Say("ok static sets");
  return 0;
}

int DynamicSets(const Args& args) {
  auto client = ConnectOrDie(args);
  const int n = client->size();
  const int me = client->rank();
  if (n < 2) Die("dynamic-sets needs two ranks or more");
  std::vector<int> b_ranks;
  for (int rank = 1; rank < n; ++rank) b_ranks.push_back(rank);
  const std::vector<int> a_ranks = n >= 3 ? std::vector<int>{0, n - 1} : std::vector<int>{0};
  const std::vector<int> c_ranks = n >= 3 ? std::vector<int>{1} : std::vector<int>{0};

  const ProcessSet a = ValueOrDie(client->AddProcessSet(Shuffled(a_ranks, me)), "add A");
  const ProcessSet b = ValueOrDie(client->AddProcessSet(Shuffled(b_ranks, me)), "add B");
  const ProcessSet global{.id = 0, .ranks = GlobalTeam(*client).members};
  ExpectSets(*client, {global, {.id = 1, .ranks = a_ranks}, {.id = 2, .ranks = b_ranks}});
  if (a.id != 1 || b.id != 2) Die(absl::StrCat("added ", Describe(a), " and ", Describe(b)));
  CheckQueries(*client, a);
  CheckQueries(*client, b);
  // A's members run its collectives while the ranks outside it wait in B's
  // first collective, which needs the last rank, busy in A: the subset
  // completes without them.
  SetSuite(*client, a);
  SetSuite(*client, b);

  OkOrDie(client->RemoveProcessSet(a.id), "remove A");
  Refused("included in a removed set", client->ProcessSetIncluded(a.id));
  const ProcessSet c = ValueOrDie(client->AddProcessSet(Shuffled(c_ranks, me)), "add C");
  if (c.id != 1) Die(absl::StrCat("the set added after removing set 1 is ", Describe(c)));
  ExpectSets(*client, {global, {.id = 1, .ranks = c_ranks}, {.id = 2, .ranks = b_ranks}});
  CheckQueries(*client, c);
  SuiteOnEverySet(*client);
  OkOrDie(client->RemoveProcessSet(b.id), "remove B");
  OkOrDie(client->RemoveProcessSet(c.id), "remove C");
  ExpectSets(*client, {global});
  SetSuite(*client, global);
  Say("ok dynamic sets");
  return 0;
}

int SetErrors(const Args& args) {
  auto client = ConnectOrDie(args);
  const int n = client->size();
  const int me = client->rank();
  std::vector<int> everyone = GlobalTeam(*client).members;
  std::reverse(everyone.begin(), everyone.end());
  Refused("add the global set", client->AddProcessSet(everyone));
  Refused("remove the global set", client->RemoveProcessSet(0));
  Refused("remove an unknown set", client->RemoveProcessSet(7));
  Refused("add a rank outside the job", client->AddProcessSet({n}));
  Refused("add a rank twice", client->AddProcessSet({0, 0}));
  std::vector<float> data(4, 1.0f);
  const TensorView view{data.data(), DataType::kFloat32, {4}};
  Refused("allreduce on an unknown set",
          client->AllreduceAsync("unknown", view, nullptr, {.process_set = 9}));
  if (n >= 2) {
    const ProcessSet first = ValueOrDie(client->AddProcessSet({0}), "add {0}");
    Refused("add an existing set", client->AddProcessSet({0}));
    if (me != 0) {
      const std::vector<int64_t> splits = {4};
      std::vector<float> out(4);
      const int32_t set = first.id;
      Refused("allreduce", client->AllreduceAsync("x", view, nullptr, {.process_set = set}));
      Refused("grouped allreduce",
              client->GroupedAllreduceAsync({"x", "y"}, {view, view}, {nullptr, nullptr},
                                            {.process_set = set}));
      Refused("allgather", client->AllgatherAsync("x", view, set));
      Refused("grouped allgather", client->GroupedAllgatherAsync({"x", "y"}, {view, view}, set));
      Refused("broadcast", client->BroadcastAsync("x", view, out.data(), 0, set));
      Refused("alltoall", client->AlltoallAsync("x", view, splits, set));
      Refused("reducescatter",
              client->ReducescatterAsync("x", view, out.data(), {.process_set = set}));
      Refused("grouped reducescatter",
              client->GroupedReducescatterAsync({"x", "y"}, {view, view}, {out.data(), out.data()},
                                                {.process_set = set}));
      Refused("barrier", client->Barrier(set));
      Refused("join", client->Join(set));
      Refused("rank query", client->ProcessSetRank(set));
    } else {
      SetSuite(*client, first);
    }
    OkOrDie(client->RemoveProcessSet(first.id), "remove {0}");
    Refused("allreduce on a removed set",
            client->AllreduceAsync("removed", view, nullptr, {.process_set = first.id}));
  }
  // The refusals left the clients intact.
  SetSuite(*client, Find(*client, 0));
  Say("ok");
  return 0;
}

}  // namespace collective::testing
