// collective-test-worker: one rank of an integration test job. A real client
// process that connects to a real daemon (COLLECTIVE_SOCKET, LOCAL_RANK,
// LOCAL_SIZE from the test) and plays one scenario. It checks what it can
// itself (results against the reference reduction, error texts) and reports
// through its exit code, stdout (facts the test asserts on) and stderr (why
// it failed).
//
//   matrix [--async] [--big-bytes N]   every op x dtype x size, bitwise checked
//          [--steps S]                 (S times over, by the same names)
//   mismatch --kind K                  K: dtype, shape, op, prescale, postscale
//   wait-stuck --expect TEXT           wait on a tensor the last rank never submits
//   victim [--expect TEXT]             submit a lone tensor, then block until killed
//                                      (or, with --expect, until it fails with TEXT)
//   connect-error --expect TEXT        Connect must fail with TEXT
//   as-uid UID [--groups G,...] [--expect TEXT]
//                                      drop to UID (keeping group 0, or only the
//                                      listed supplementary groups), then connect
//   as-uid UID --then SCENARIO ...     drop to UID, then play SCENARIO
//   duplicate                          a name submitted twice is refused at once
//                                      (on each rank in turn, as 'dup.RANK')
//   bad-args                           arguments the client library refuses itself
//   leave-on-signal                    connect, then Close on SIGUSR1
//   cancel-on-signal                   connect; SIGUSR1 cancels it (ConnectCancellation)
//   reinit [--times N]                 connect, allreduce, barrier, Close; N times
//
// wait-stuck and victim take --daemon-timeout-ms N (ClientOptions::
// daemon_timeout). Scenarios that fail a collective print the error and the CLOCK_MONOTONIC
// time it arrived ("failed at monotonic S"), so that a test can bound the
// delay from an event it caused (a kill) to the failure.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grp.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collective/client.h"
#include "common/dtype.h"
#include "daemon/exec/reduce_kernels.h"
#include "tests/common/reference_reduce.h"
#include "tests/common/worker_args.h"

namespace collective::testing {
namespace {

double MonotonicSeconds() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "worker: %s\n", message.c_str());
  std::exit(1);
}

// Connects with the options in `args`: --daemon-timeout-ms N, how long the
// daemon may go without a heartbeat before the client gives up on it.
std::unique_ptr<Client> ConnectOrDie(const Args& args = {}) {
  ClientOptions options;
  if (HasFlag(args, "--daemon-timeout-ms")) {
    options.daemon_timeout = absl::Milliseconds(std::stoll(Flag(args, "--daemon-timeout-ms")));
  }
  auto client = Client::Connect(options);
  if (!client.ok()) Die(absl::StrCat("connect: ", client.status().ToString()));
  return std::move(*client);
}

// One allreduce of the matrix: what every rank submits and what it expects.
struct Case {
  std::string name;
  v1::DataType dtype;
  v1::ReduceOp op;
  size_t count;
  double prescale = 1;
  double postscale = 1;
  int mode = 0;  // how the input and output are placed (see RunCase)
};

std::vector<Case> MatrixCases(size_t big_bytes) {
  std::vector<Case> cases;
  const v1::ReduceOp ops[] = {v1::REDUCE_OP_SUM, v1::REDUCE_OP_AVERAGE, v1::REDUCE_OP_MIN,
                              v1::REDUCE_OP_MAX, v1::REDUCE_OP_PRODUCT};
  int index = 0;
  for (v1::ReduceOp op : ops) {
    for (int d = v1::DATA_TYPE_UINT8; d <= v1::DATA_TYPE_BOOL; ++d) {
      const auto dtype = static_cast<v1::DataType>(d);
      const v1::ReduceOp kernel_op = op == v1::REDUCE_OP_AVERAGE ? v1::REDUCE_OP_SUM : op;
      if (!daemon::exec::IsReducible(dtype, kernel_op)) continue;
      const size_t element = ElementSize(dtype);
      for (size_t count :
           {size_t{0}, size_t{1}, size_t{7}, size_t{4096 + 3}, big_bytes / element + 3}) {
        Case c{absl::StrCat(ReduceOpName(op), ".", DataTypeName(dtype), ".", count), dtype, op,
               count};
        if (dtype != v1::DATA_TYPE_BOOL && index % 3 == 1) {
          c.prescale = 0.5;
          c.postscale = 4;
        }
        c.mode = index % 6;
        cases.push_back(c);
        ++index;
      }
    }
  }
  return cases;
}

std::vector<std::byte> RankData(const Case& c, int rank) {
  std::vector<std::byte> data(c.count * ElementSize(c.dtype));
  FillTestData(c.dtype, c.op, std::hash<std::string>{}(c.name) * 31 + rank, data.data(), c.count);
  return data;
}

std::vector<std::byte> Expected(const Case& c, int size) {
  std::vector<std::vector<std::byte>> inputs;
  std::vector<const void*> pointers;
  for (int rank = 0; rank < size; ++rank) inputs.push_back(RankData(c, rank));
  for (const auto& input : inputs) pointers.push_back(input.data());
  daemon::exec::ReduceSpec spec{c.dtype, c.op, c.prescale, c.postscale, 1};
  if (c.op == v1::REDUCE_OP_AVERAGE) {
    spec.op = v1::REDUCE_OP_SUM;
    spec.divisor = size;
  }
  std::vector<std::byte> out(c.count * ElementSize(c.dtype));
  ReferenceReduce(spec, pointers, out.data(), c.count);
  return out;
}

// Input and output placement by mode: 0 private input, private output
// (copied in and out); 1 arena input, view of the result (zero-copy); 2
// private input reduced in place; 3 arena input reduced in place (the daemon
// writes the result there); 4 private input, arena output (likewise); 5 arena
// input, arena output one element past the input's start, partly over it
// (the daemon would overwrite input it has yet to read: the result is copied
// out).
struct Placed {
  std::vector<std::byte> private_input;
  Buffer arena_input;
  Buffer arena_output;
  std::vector<std::byte> private_output;
  const void* input = nullptr;
  void* output = nullptr;
};

Placed Place(Client& client, const Case& c, std::vector<std::byte> data) {
  Placed placed;
  const bool in_arena = c.mode == 1 || c.mode == 3 || c.mode == 5;
  const size_t element = ElementSize(c.dtype);
  if (in_arena) {
    auto buffer = client.Allocate(data.size() + (c.mode == 5 ? element : 0));
    if (!buffer.ok()) Die(absl::StrCat(c.name, ": allocate: ", buffer.status().ToString()));
    if (!data.empty()) std::memcpy(buffer->data(), data.data(), data.size());
    placed.arena_input = std::move(*buffer);
    placed.input = placed.arena_input.data();
  } else {
    placed.private_input = std::move(data);
    placed.input = placed.private_input.data();
  }
  if (c.mode == 0) {
    placed.private_output.resize(c.count * ElementSize(c.dtype));
    placed.output = placed.private_output.data();
  } else if (c.mode == 5) {
    placed.output = static_cast<std::byte*>(placed.arena_input.data()) + element;
  } else if (c.mode == 4) {
    auto buffer = client.Allocate(c.count * element);
    if (!buffer.ok()) Die(absl::StrCat(c.name, ": allocate output: ", buffer.status().ToString()));
    placed.arena_output = std::move(*buffer);
    placed.output = placed.arena_output.data();
  } else if (c.mode >= 2) {
    placed.output = const_cast<void*>(placed.input);
  }
  return placed;
}

Client::Handle Submit(Client& client, const Case& c, const Placed& placed) {
  TensorView view{placed.input, static_cast<DataType>(c.dtype), {static_cast<int64_t>(c.count)}};
  auto handle = client.AllreduceAsync(c.name, view, placed.output,
                                      {static_cast<ReduceOp>(c.op), c.prescale, c.postscale});
  if (!handle.ok()) Die(absl::StrCat(c.name, ": submit: ", handle.status().ToString()));
  return *handle;
}

// Across nodes each node rounds its partial result: floating-point results
// are then compared with a tolerance (--across-nodes), not bitwise.
bool compare_close = false;

void Check(Client& client, const Case& c, Client::Handle handle,
           const std::vector<std::byte>& expected) {
  const uint64_t copied_before = client.copied_out_bytes();
  auto result = client.Wait(handle);
  if (!result.ok()) Die(absl::StrCat(c.name, ": wait: ", result.status().ToString()));
  // An output in the arena receives the result from the daemon (on one
  // node and across nodes alike); any other output is a copy out of the
  // result segment; a view copies nothing.
  // (Mode 5's output lies apart from an input of at most one element.)
  const bool arena_output = c.mode == 3 || c.mode == 4 || (c.mode == 5 && c.count <= 1);
  const uint64_t copied = client.copied_out_bytes() - copied_before;
  const uint64_t want_copied = c.mode == 1 || arena_output ? 0 : expected.size();
  if (copied != want_copied) {
    Die(absl::StrCat(c.name, " (mode ", c.mode, "): Wait copied ", copied, " bytes out, expected ",
                     want_copied));
  }
  if (result->bytes() != expected.size()) {
    Die(absl::StrCat(c.name, ": result has ", result->bytes(), " bytes, expected ",
                     expected.size()));
  }
  const std::string difference =
      compare_close ? CompareClose(c.dtype, expected.data(), result->data(), c.count)
                    : CompareBitwise(c.dtype, expected.data(), result->data(), c.count);
  if (!difference.empty()) Die(absl::StrCat(c.name, " (mode ", c.mode, "): ", difference));
}

int Matrix(const Args& args) {
  auto client = ConnectOrDie();
  const size_t big_bytes = std::stoull(Flag(args, "--big-bytes", "65536"));
  const std::vector<Case> cases = MatrixCases(big_bytes);
  compare_close = HasFlag(args, "--across-nodes");
  // The same names step after step: across nodes, steps after the first are
  // decided from the response cache.
  const int steps = std::stoi(Flag(args, "--steps", "1"));
  for (int step = 0; step < steps; ++step) {
    if (HasFlag(args, "--async")) {
      // Everything outstanding at once: the daemon fuses what it can.
      std::vector<Placed> placed;
      std::vector<Client::Handle> handles;
      placed.reserve(cases.size());
      for (const Case& c : cases) {
        placed.push_back(Place(*client, c, RankData(c, client->rank())));
        handles.push_back(Submit(*client, c, placed.back()));
      }
      for (size_t i = 0; i < cases.size(); ++i) {
        Check(*client, cases[i], handles[i], Expected(cases[i], client->size()));
      }
    } else {
      for (const Case& c : cases) {
        Placed placed = Place(*client, c, RankData(c, client->rank()));
        Check(*client, c, Submit(*client, c, placed), Expected(c, client->size()));
      }
    }
  }
  std::printf("ok %zu cases on rank %d of %d\n", cases.size(), client->rank(), client->size());
  return 0;
}

// Every rank but the last submits a well-formed allreduce; the last deviates
// in one respect. Every rank must receive the same error; then the same
// clients run a correct allreduce.
int Mismatch(const Args& args) {
  auto client = ConnectOrDie();
  const std::string kind = Flag(args, "--kind");
  const bool odd = client->rank() == client->size() - 1;
  std::vector<float> data(6, 1.0f);
  TensorView view{data.data(), DataType::kFloat32, {6}};
  AllreduceOptions options;
  if (odd) {
    if (kind == "dtype") view = {data.data(), DataType::kInt32, {6}};
    if (kind == "shape") view = {data.data(), DataType::kFloat32, {2, 3}};
    if (kind == "op") options.op = ReduceOp::kMax;
    if (kind == "prescale") options.prescale = 0.5;
    if (kind == "postscale") options.postscale = 3;
  }
  const absl::Status status = client->Allreduce("bad", view, data.data(), options);
  if (status.ok()) Die("the mismatched allreduce succeeded");
  std::printf("error: %s\n", status.ToString().c_str());
  std::fflush(stdout);
  std::vector<float> good(5, static_cast<float>(client->rank()));
  const absl::Status after =
      client->Allreduce("good", {good.data(), DataType::kFloat32, {5}}, good.data());
  if (!after.ok()) Die(absl::StrCat("the allreduce after the mismatch failed: ", after.ToString()));
  const float expected = static_cast<float>(client->size() * (client->size() - 1) / 2);
  if (good[0] != expected) Die(absl::StrCat("after the mismatch: ", good[0], " != ", expected));
  return 0;
}

int WaitStuck(const Args& args) {
  auto client = ConnectOrDie(args);
  std::vector<float> data(1000, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status =
      client->Allreduce("stuck", {data.data(), DataType::kFloat32, {1000}}, data.data());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (status.ok()) Die("the allreduce succeeded although a rank never submitted");
  std::printf("error after %.3f s: %s\n", seconds, status.ToString().c_str());
  std::printf("failed at monotonic %.6f\n", MonotonicSeconds());
  // Now, not at exit: a test may read it while Client's destructor runs.
  std::fflush(stdout);
  const std::string expect = Flag(args, "--expect");
  if (!absl::StrContains(status.message(), expect)) {
    Die(absl::StrCat("expected the error to contain '", expect, "'; got ", status.ToString()));
  }
  return 0;
}

int Victim(const Args& args) {
  auto client = ConnectOrDie(args);
  std::vector<float> data(1000, 1.0f);
  auto handle =
      client->AllreduceAsync("victim", {data.data(), DataType::kFloat32, {1000}}, data.data());
  if (!handle.ok()) Die(handle.status().ToString());
  std::printf("submitted\n");
  std::fflush(stdout);
  // Waits for ever: the test kills this process mid-allreduce, or (with
  // --expect) the daemon goes away under it.
  auto result = client->Wait(*handle);
  if (result.ok()) Die("the victim's allreduce succeeded");
  std::printf("error: %s\n", result.status().ToString().c_str());
  std::printf("failed at monotonic %.6f\n", MonotonicSeconds());
  // Now, not at exit: a test may read it while Client's destructor runs.
  std::fflush(stdout);
  if (!HasFlag(args, "--expect")) Die("the victim's allreduce ended");
  const std::string expect = Flag(args, "--expect");
  if (!absl::StrContains(result.status().message(), expect)) {
    Die(absl::StrCat("expected the error to contain '", expect, "'; got ",
                     result.status().ToString()));
  }
  return 0;
}

int ConnectError(const Args& args) {
  auto client = Client::Connect();
  if (client.ok()) Die("Connect succeeded");
  std::printf("error: %s\n", client.status().ToString().c_str());
  const std::string expect = Flag(args, "--expect");
  if (!absl::StrContains(client.status().ToString(), expect)) {
    Die(absl::StrCat("expected the error to contain '", expect, "'; got ",
                     client.status().ToString()));
  }
  return 0;
}

int RunScenario(const std::string& name, const Args& args);

int AsUid(const Args& args) {
  const uid_t uid = static_cast<uid_t>(std::stoul(Flag(args, "as-uid")));
  // Keep group 0 as a supplementary group so that the 0660 root-group socket
  // can be reached, and the daemon's own policy is what decides; or the
  // groups the test names ("" for none).
  std::vector<gid_t> groups = {0};
  if (HasFlag(args, "--groups")) {
    groups.clear();
    for (absl::string_view group : absl::StrSplit(Flag(args, "--groups"), ',', absl::SkipEmpty())) {
      groups.push_back(static_cast<gid_t>(std::stoul(std::string(group))));
    }
  }
  if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) {
    Die(absl::StrCat("cannot become uid ", uid, ": ", std::strerror(errno)));
  }
  if (HasFlag(args, "--then")) return RunScenario(Flag(args, "--then"), args);
  if (HasFlag(args, "--expect")) return ConnectError(args);
  auto client = ConnectOrDie();
  std::vector<int32_t> data(3, 2);
  const absl::Status status =
      client->Allreduce("as-uid", {data.data(), DataType::kInt32, {3}}, data.data());
  if (!status.ok()) Die(status.ToString());
  std::printf("ok as uid %u\n", uid);
  return 0;
}

// Each rank in turn submits "dup.R" twice: the second is refused. A name
// is outstanding only until its collective completes, so the other ranks
// hold back their "dup.R" until rank R has checked (they wait on "sync.R",
// which R submits after its check). Then every rank reuses the name.
int Duplicate(const Args&) {
  auto client = ConnectOrDie();
  std::vector<float> data(4, 1.0f);
  const TensorView view{data.data(), DataType::kFloat32, {4}};
  for (int turn = 0; turn < client->size(); ++turn) {
    const std::string name = absl::StrCat("dup.", turn);
    const std::string sync = absl::StrCat("sync.", turn);
    absl::StatusOr<Client::Handle> first;
    if (client->rank() == turn) {
      first = client->AllreduceAsync(name, view, data.data());
      if (!first.ok()) Die(first.status().ToString());
      auto second = client->AllreduceAsync(name, view, data.data());
      if (second.ok() || second.status().code() != absl::StatusCode::kAlreadyExists) {
        Die(absl::StrCat("a duplicate name was not refused: ", second.status().ToString()));
      }
      std::printf("error: %s\n", second.status().ToString().c_str());
      if (!client->Allreduce(sync, view, data.data()).ok()) Die(sync + " failed");
    } else {
      if (!client->Allreduce(sync, view, data.data()).ok()) Die(sync + " failed");
      first = client->AllreduceAsync(name, view, data.data());
      if (!first.ok()) Die(first.status().ToString());
    }
    auto result = client->Wait(*first);
    if (!result.ok()) Die(result.status().ToString());
    // The name is free again once its collective completed.
    if (!client->Allreduce(name, view, data.data()).ok()) Die("reusing a completed name failed");
  }
  return 0;
}

// Requests the client library must refuse at the call, before anything
// reaches the daemon: each prints "NAME: STATUS". The test starts the daemon
// with --max-name-bytes 16. Afterwards the client still works.
int BadArgs(const Args&) {
  auto client = ConnectOrDie();
  std::vector<float> floats(4, 1.0f);
  std::vector<uint8_t> bools(4, 1);
  std::vector<int32_t> ints(4, 1);
  const TensorView good{floats.data(), DataType::kFloat32, {4}};
  struct BadCase {
    std::string label;
    std::string name;
    TensorView view;
    AllreduceOptions options;
  };
  const std::vector<BadCase> cases = {
      {"bool-sum", "flags", {bools.data(), DataType::kBool, {4}}, {.op = ReduceOp::kSum}},
      {"adasum-int", "counts", {ints.data(), DataType::kInt32, {4}}, {.op = ReduceOp::kAdasum}},
      {"empty-name", "", good, {}},
      {"negative-dim", "grad", {floats.data(), DataType::kFloat32, {2, -2}}, {}},
      {"long-name", std::string(17, 'n'), good, {}},
  };
  for (const BadCase& c : cases) {
    auto handle = client->AllreduceAsync(c.name, c.view, floats.data(), c.options);
    if (handle.ok()) Die(absl::StrCat(c.label, ": the request was accepted"));
    std::printf("%s: %s\n", c.label.c_str(), handle.status().ToString().c_str());
  }
  // The longest allowed name still goes through, and the client is intact.
  const absl::Status ok = client->Allreduce(std::string(16, 'n'), good, floats.data());
  if (!ok.ok()) Die(absl::StrCat("the valid allreduce after the refusals failed: ", ok.ToString()));
  if (floats[0] != static_cast<float>(client->size())) {
    Die(absl::StrCat("the valid allreduce gave ", floats[0], ", expected ", client->size()));
  }
  std::printf("ok\n");
  return 0;
}

// Connects, then leaves the job (Client::Close) when the test sends SIGUSR1,
// so that the test decides when: e.g. once another rank waits on it.
int LeaveOnSignal(const Args&) {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  // Before Connect, so that gRPC's threads inherit the mask and the signal
  // is only ever taken by sigwait.
  pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
  auto client = ConnectOrDie();
  std::printf("connected as rank %d\n", client->rank());
  std::fflush(stdout);
  int received = 0;
  sigwait(&usr1, &received);
  const absl::Status closed = client->Close();
  if (!closed.ok()) Die(absl::StrCat("Close: ", closed.ToString()));
  std::printf("left\n");
  return 0;
}

// Connects to a job that cannot form, and cancels that from another thread
// on SIGUSR1; prints the error Connect returned.
int CancelOnSignal(const Args&) {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, nullptr);  // before any thread starts
  ClientOptions options;
  options.cancellation = std::make_shared<ConnectCancellation>();
  std::thread canceller([cancellation = options.cancellation, usr1] {
    int received = 0;
    sigwait(&usr1, &received);
    cancellation->Cancel();
  });
  auto client = Client::Connect(options);
  canceller.join();
  if (client.ok()) Die("Connect succeeded");
  std::printf("error: %s\n", client.status().ToString().c_str());
  return 0;
}

// Initialises, allreduces, passes a barrier and leaves, --times N times
// over, as Horovod's suite (shutdown and init after every test) and elastic
// training do: a rank that left connects again at once, whether or not the
// other ranks have left the previous run yet.
int Reinit(const Args& args) {
  const int times = std::stoi(Flag(args, "--times", "10"));
  for (int run = 0; run < times; ++run) {
    auto client = Client::Connect();
    if (!client.ok()) Die(absl::StrCat("init ", run, ": ", client.status().ToString()));
    const int size = (*client)->size();
    std::vector<float> data(4, static_cast<float>((*client)->rank() + 1));
    const absl::Status reduced = (*client)->Allreduce(
        absl::StrCat("reinit.", run), {data.data(), DataType::kFloat32, {4}}, data.data());
    if (!reduced.ok()) Die(absl::StrCat("allreduce ", run, ": ", reduced.ToString()));
    const float expected = static_cast<float>(size * (size + 1) / 2);
    if (data[0] != expected) {
      Die(absl::StrCat("allreduce ", run, " gave ", data[0], ", expected ", expected));
    }
    const absl::Status barrier = (*client)->Barrier();
    if (!barrier.ok()) Die(absl::StrCat("barrier ", run, ": ", barrier.ToString()));
    const absl::Status closed = (*client)->Close();
    if (!closed.ok()) Die(absl::StrCat("shutdown ", run, ": ", closed.ToString()));
  }
  std::printf("ok %d inits\n", times);
  return 0;
}

int RunScenario(const std::string& name, const Args& args) {
  const std::map<std::string, std::function<int(const Args&)>> scenarios = {
      {"matrix", Matrix},
      {"mismatch", Mismatch},
      {"wait-stuck", WaitStuck},
      {"victim", Victim},
      {"connect-error", ConnectError},
      {"as-uid", AsUid},
      {"duplicate", Duplicate},
      {"bad-args", BadArgs},
      {"leave-on-signal", LeaveOnSignal},
      {"reinit", Reinit},
      {"cancel-on-signal", CancelOnSignal},
  };
  const auto it = scenarios.find(name);
  if (it == scenarios.end()) Die("unknown scenario " + name);
  return it->second(args);
}

}  // namespace
}  // namespace collective::testing

int main(int argc, char** argv) {
  const collective::testing::Args args(argv + 1, argv + argc);
  if (args.empty()) collective::testing::Die("no scenario given");
  return collective::testing::RunScenario(args[0], args);
}
