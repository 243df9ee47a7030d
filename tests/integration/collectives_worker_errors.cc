// Errors a job survives, for every collective: arguments that disagree
// across ranks (one error, received by every rank), and arguments the client
// library refuses at the call (splits, shapes, ops, roots, duplicate
// names). After each, the same clients run every collective correctly.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/collectives_checks.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {
namespace {

// One request as a rank describes it.
struct Request {
  std::string collective;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  AllreduceOptions options;
  int root = 0;
};

// What the ranks agree on, per collective (see MismatchScenario).
Request GoodRequest(const std::string& collective, int n, int me) {
  Request request{.collective = collective};
  if (collective == "allreduce" || collective == "broadcast") request.shape = {6};
  if (collective == "allgather") request.shape = {me + 1, 3};
  if (collective == "alltoall" || collective == "reducescatter") request.shape = {2 * n, 3};
  return request;
}

// The last rank's request: the good one, deviating in `kind`.
Request OddRequest(Request request, const std::string& kind) {
  if (kind == "dtype") request.dtype = DataType::kInt32;
  if (kind == "shape") {
    if (request.collective == "allreduce" || request.collective == "broadcast") {
      request.shape = {2, 3};
    } else {
      request.shape.back() = 4;
    }
  }
  if (kind == "rank") request.shape = {request.shape.front() * 3};
  if (kind == "op") {
    request.options.op = request.collective == "allreduce" ? ReduceOp::kMax : ReduceOp::kAverage;
  }
  if (kind == "prescale") request.options.prescale = 0.5;
  if (kind == "postscale") request.options.postscale = 3;
  if (kind == "root") request.root = 1;
  if (kind == "collective") request.collective = "allgather";
  return request;
}

// Submits `request` under each of `names`, as one group if `grouped`.
std::vector<Client::Handle> SubmitRequest(Client& client, const Request& r,
                                          const std::vector<std::string>& names, bool grouped,
                                          const void* data, void* out) {
  const TensorView view{data, r.dtype, r.shape};
  std::vector<Client::Handle> handles;
  if (grouped) {
    const std::vector<TensorView> views(names.size(), view);
    const std::vector<void*> outs(names.size(), nullptr);
    if (r.collective == "allreduce") {
      return ValueOrDie(client.GroupedAllreduceAsync(names, views, outs, r.options), "group");
    }
    if (r.collective == "allgather") {
      return ValueOrDie(client.GroupedAllgatherAsync(names, views), "group");
    }
    return ValueOrDie(client.GroupedReducescatterAsync(names, views, outs, r.options), "group");
  }
  for (const std::string& name : names) {
    absl::StatusOr<Client::Handle> handle;
    if (r.collective == "allreduce") handle = client.AllreduceAsync(name, view, out, r.options);
    if (r.collective == "allgather") handle = client.AllgatherAsync(name, view);
    if (r.collective == "broadcast") handle = client.BroadcastAsync(name, view, out, r.root);
    if (r.collective == "alltoall") handle = client.AlltoallAsync(name, view);
    if (r.collective == "reducescatter") {
      handle = client.ReducescatterAsync(name, view, out, r.options);
    }
    handles.push_back(ValueOrDie(handle, absl::StrCat("submit ", r.collective, " '", name, "'")));
  }
  return handles;
}

void Refused(const std::string& label, absl::StatusCode code, const absl::Status& status) {
  if (status.code() != code) {
    Die(absl::StrCat(label, ": expected ", absl::StatusCodeToString(code), ", got ",
                     status.ToString()));
  }
  Say(absl::StrCat(label, ": ", status.ToString()));
}

void Refused(const std::string& label, const absl::StatusOr<Client::Handle>& handle) {
  Refused(label, absl::StatusCode::kInvalidArgument, handle.status());
}

// Each collective submits `name` and, while it is outstanding, `name` again
// (or the same name twice in one group): refused at the call. The first
// then completes normally. The input lies in the arena: a private one would
// be staged, and allocating the staging space takes in the completions that
// have arrived, so the first might have completed (and freed its name)
// before the second call.
void Duplicates(Client& client) {
  const int n = client.size();
  const Buffer data = ValueOrDie(client.Allocate(2 * n * sizeof(float)), "allocate");
  std::vector<float> out(static_cast<size_t>(2 * n));
  const TensorView view{data.data(), DataType::kFloat32, {2 * n}};
  using Submit = std::function<absl::StatusOr<Client::Handle>(const std::string&)>;
  const std::vector<std::pair<std::string, Submit>> collectives = {
      {"allreduce",
       [&](const std::string& name) { return client.AllreduceAsync(name, view, out.data()); }},
      {"allgather", [&](const std::string& name) { return client.AllgatherAsync(name, view); }},
      {"broadcast",
       [&](const std::string& name) { return client.BroadcastAsync(name, view, out.data(), 0); }},
      {"alltoall", [&](const std::string& name) { return client.AlltoallAsync(name, view); }},
      {"reducescatter",
       [&](const std::string& name) { return client.ReducescatterAsync(name, view, out.data()); }},
  };
  for (const auto& [collective, submit] : collectives) {
    const std::string name = "dup." + collective;
    const Client::Handle first = ValueOrDie(submit(name), name);
    Refused(absl::StrCat("duplicate ", collective), absl::StatusCode::kAlreadyExists,
            submit(name).status());
    // A name is a name whatever the collective.
    Refused(absl::StrCat("duplicate ", collective, " as allreduce"),
            absl::StatusCode::kAlreadyExists,
            client.AllreduceAsync(name, view, out.data()).status());
    OkOrDie(client.Wait(first).status(), name);
  }
  Refused(
      "duplicate in a grouped allreduce", absl::StatusCode::kAlreadyExists,
      client.GroupedAllreduceAsync({"dup.g", "dup.g"}, {view, view}, {nullptr, nullptr}).status());
  Refused("duplicate in a grouped allgather", absl::StatusCode::kAlreadyExists,
          client.GroupedAllgatherAsync({"dup.g", "dup.g"}, {view, view}).status());
  Refused(
      "duplicate in a grouped reducescatter", absl::StatusCode::kAlreadyExists,
      client.GroupedReducescatterAsync({"dup.g", "dup.g"}, {view, view}, {out.data(), out.data()})
          .status());
}

}  // namespace

int MismatchScenario(const Args& args) {
  auto client = ConnectOrDie(args);
  const int n = client->size();
  const int me = client->rank();
  const std::string collective = Flag(args, "--collective");
  const std::string kind = Flag(args, "--kind");
  const Request good = GoodRequest(collective, n, me);
  const Request request = me == n - 1 ? OddRequest(good, kind) : good;
  std::vector<float> data(256, 1.0f);
  std::vector<float> out(256);
  // A group on the last rank only: 'bad' and 'bad.partner' together there,
  // each alone elsewhere. Both fail everywhere.
  const bool grouped = kind == "group" && me == n - 1;
  const std::vector<std::string> names = kind == "group"
                                             ? std::vector<std::string>{"bad", "bad.partner"}
                                             : std::vector<std::string>{"bad"};
  const std::vector<Client::Handle> handles =
      SubmitRequest(*client, request, names, grouped, data.data(), out.data());
  for (size_t i = 0; i < handles.size(); ++i) {
    const absl::Status status = client->Wait(handles[i]).status();
    if (status.ok()) Die(absl::StrCat("the mismatched '", names[i], "' succeeded"));
    Say(absl::StrCat("error: ", status.ToString()));
  }
  EveryCollective(*client, GlobalTeam(*client), "after.");
  return 0;
}

int CallErrors(const Args& args) {
  auto client = ConnectOrDie(args);
  const int n = client->size();
  std::vector<float> data(static_cast<size_t>(4 * n + 4), 1.0f);
  std::vector<float> out(data.size());
  const auto view = [&](std::vector<int64_t> shape) {
    return TensorView{data.data(), DataType::kFloat32, std::move(shape)};
  };
  // Alltoall splits.
  Refused("splits count", client->AlltoallAsync("a2a", view({n}), std::vector<int64_t>(n + 1, 0)));
  std::vector<int64_t> negative(n, 0);
  negative[0] = -1;
  if (n > 1) negative[1] = 1 + n;
  Refused("negative split", client->AlltoallAsync("a2a", view({n}), negative));
  Refused("splits sum", client->AlltoallAsync("a2a", view({n + 1}), std::vector<int64_t>(n, 1)));
  if (n > 1) {
    Refused("uneven without splits", client->AlltoallAsync("a2a", view({n + 1})));
  }
  Refused("alltoall of a scalar", client->AlltoallAsync("a2a", view({})));
  Refused("allgather of a scalar", client->AllgatherAsync("ag", view({})));
  // Reducescatter: rows needed, sum and average only.
  Refused("reducescatter of a scalar", client->ReducescatterAsync("rs", view({}), out.data()));
  Refused("reducescatter min",
          client->ReducescatterAsync("rs", view({n}), out.data(), {.op = ReduceOp::kMin}));
  Refused("reducescatter max",
          client->ReducescatterAsync("rs", view({n}), out.data(), {.op = ReduceOp::kMax}));
  // Broadcast roots are ranks of the set.
  Refused("broadcast root past the end", client->BroadcastAsync("bc", view({4}), out.data(), n));
  Refused("negative broadcast root", client->BroadcastAsync("bc", view({4}), out.data(), -1));
  Duplicates(*client);
  // Nothing refused reached the daemon; the clients work.
  EveryCollective(*client, GlobalTeam(*client), "after.");
  Say("ok");
  return 0;
}

}  // namespace collective::testing
