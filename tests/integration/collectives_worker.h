// collective-collectives-worker: one rank of an integration test of the
// collectives beyond allreduce (see collectives_worker.cc for the scenarios).
// This header holds what the scenario files share: argument parsing, dying
// with a reason, connecting, deterministic per-rank data, and the daemon's
// Status seen from a worker (to sequence ranks without sleeping).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collective/client.h"
#include "collective/v1/status.pb.h"
#include "collective/v1/types.pb.h"
#include "tests/common/worker_args.h"

namespace collective::testing {

// Prints the reason on stderr and exits 1: the test reports the worker's
// stderr.
[[noreturn]] void Die(const std::string& message);
// One line on stdout, flushed at once (tests read stdout after the exit, but
// a worker that is killed must not lose what it said).
void Say(const std::string& line);

void OkOrDie(const absl::Status& status, const std::string& what);
template <typename T>
T ValueOrDie(absl::StatusOr<T> value, const std::string& what) {
  if (!value.ok()) Die(absl::StrCat(what, ": ", value.status().ToString()));
  return std::move(*value);
}

// Connects (COLLECTIVE_SOCKET, LOCAL_RANK, LOCAL_SIZE from the test). With
// --static-sets "3,1;0,2" the client asks for static process sets {1, 3}
// and {0, 2}, listed as given.
std::unique_ptr<Client> ConnectOrDie(const Args& args);
// "3,1;0,2" -> {{3, 1}, {0, 2}}.
std::vector<std::vector<int>> ParseSets(const std::string& text);

// Every dtype the daemon knows, bool included.
std::vector<v1::DataType> AllDataTypes();
// The ones that reduce with sum (all but bool).
std::vector<v1::DataType> NumericDataTypes();

// Deterministic data of (name, global rank): every rank can compute what
// every other rank sends. `op` selects value ranges (see FillTestData).
std::vector<std::byte> RankData(const std::string& name, int rank, v1::DataType dtype, size_t count,
                                v1::ReduceOp op = v1::REDUCE_OP_SUM);

// Element counts of the size matrix: 0, 1, 7 (not a multiple of a vector
// width), 4096 + 3, and the element count of `big_bytes` + 3 (beyond the
// fusion threshold when big_bytes is the threshold).
std::vector<size_t> MatrixCounts(v1::DataType dtype, size_t big_bytes);

// The daemon's Status, asked over its socket ($COLLECTIVE_SOCKET).
absl::StatusOr<v1::StatusResponse> DaemonStatus();
// Polls DaemonStatus until `done` holds; dies after `timeout`. This is how
// ranks wait for each other's state (a join pending, a tensor failed)
// without sleeping for a guessed time.
template <typename Predicate>
v1::StatusResponse AwaitDaemon(Predicate done, const std::string& what,
                               absl::Duration timeout = absl::Seconds(60));
void PauseBeforeNextPoll();

// Whether `status` lists tensor `name` of `process_set` as pending with
// exactly `ready` ranks submitted.
bool Pending(const v1::StatusResponse& status, const std::string& name, int ready,
             int32_t process_set = 0);
bool AnyPending(const v1::StatusResponse& status, const std::string& name);

template <typename Predicate>
v1::StatusResponse AwaitDaemon(Predicate done, const std::string& what, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<v1::StatusResponse> status = DaemonStatus();
    if (status.ok() && done(*status)) return *status;
    if (absl::Now() > deadline) {
      Die(absl::StrCat("the daemon never reached the state '", what, "': ",
                       status.ok() ? status->ShortDebugString() : status.status().ToString()));
    }
    PauseBeforeNextPoll();
  }
}

// Scenarios (each returns the exit code).
int AllgatherMatrix(const Args& args);
int BroadcastMatrix(const Args& args);
int AlltoallMatrix(const Args& args);
int ReducescatterMatrix(const Args& args);
int Grouped(const Args& args);
int MixedAsync(const Args& args);
int StaticSets(const Args& args);
int DynamicSets(const Args& args);
int SetErrors(const Args& args);
int BarrierScenario(const Args& args);
int JoinScenario(const Args& args);
int MismatchScenario(const Args& args);
int CallErrors(const Args& args);
int StallScenario(const Args& args);
int TimelineScenario(const Args& args);
int RepeatScenario(const Args& args);
int LoopScenario(const Args& args);
int LeadScenario(const Args& args);
int WorkloadScenario(const Args& args);
// collectives_worker_rooted.cc
int RootedMatrix(const Args& args);
int RootedMismatch(const Args& args);
// collectives_worker_p2p.cc
int P2pRing(const Args& args);
int P2pOrder(const Args& args);
int P2pSelf(const Args& args);
int P2pMismatch(const Args& args);
int P2pDeadPeer(const Args& args);
int P2pPending(const Args& args);
int P2pBesideAllreduce(const Args& args);

}  // namespace collective::testing
