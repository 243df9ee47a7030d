#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "collective/v1/collective.grpc.pb.h"
#include "common/dtype.h"
#include "tests/common/reference_reduce.h"
#include "tests/integration/collectives_checks.h"
#include "tests/integration/collectives_worker.h"

namespace collective::testing {

void Die(const std::string& message) {
  std::fprintf(stderr, "worker: %s\n", message.c_str());
  std::fflush(stdout);
  std::exit(1);
}

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void OkOrDie(const absl::Status& status, const std::string& what) {
  if (!status.ok()) Die(absl::StrCat(what, ": ", status.ToString()));
}

std::vector<std::vector<int>> ParseSets(const std::string& text) {
  std::vector<std::vector<int>> sets;
  for (absl::string_view set : absl::StrSplit(text, ';', absl::SkipEmpty())) {
    std::vector<int> ranks;
    for (absl::string_view rank : absl::StrSplit(set, ',', absl::SkipEmpty())) {
      int value = 0;
      if (!absl::SimpleAtoi(rank, &value)) Die(absl::StrCat("bad rank in --static-sets: ", text));
      ranks.push_back(value);
    }
    sets.push_back(std::move(ranks));
  }
  return sets;
}

std::unique_ptr<Client> ConnectOrDie(const Args& args) {
  CompareReductionsClosely(HasFlag(args, "--across-nodes"));
  ClientOptions options;
  options.static_process_sets = ParseSets(Flag(args, "--static-sets"));
  return ValueOrDie(Client::Connect(options), "connect");
}

std::vector<v1::DataType> AllDataTypes() {
  std::vector<v1::DataType> dtypes;
  for (int d = v1::DATA_TYPE_UINT8; d <= v1::DATA_TYPE_BOOL; ++d) {
    dtypes.push_back(static_cast<v1::DataType>(d));
  }
  return dtypes;
}

std::vector<v1::DataType> NumericDataTypes() {
  std::vector<v1::DataType> dtypes = AllDataTypes();
  dtypes.pop_back();  // bool
  return dtypes;
}

std::vector<std::byte> RankData(const std::string& name, int rank, v1::DataType dtype, size_t count,
                                v1::ReduceOp op) {
  // FNV-1a: the same seed in every process, whatever std::hash does.
  uint64_t seed = 14695981039346656037ull;
  for (char c : name) seed = (seed ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::vector<std::byte> data(count * ElementSize(dtype));
  FillTestData(dtype, op, seed * 31 + static_cast<uint64_t>(rank), data.data(), count);
  return data;
}

std::vector<size_t> MatrixCounts(v1::DataType dtype, size_t big_bytes) {
  return {0, 1, 7, 4096 + 3, big_bytes / ElementSize(dtype) + 3};
}

namespace {

std::unique_ptr<v1::CollectiveService::Stub> StubFor(const std::string& socket) {
  return v1::CollectiveService::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
}

absl::StatusOr<v1::StatusResponse> StatusOf(v1::CollectiveService::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StatusResponse response;
  const grpc::Status status = stub.Status(&context, {}, &response);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  return response;
}

// Adds `other`'s ranks of each pending tensor and its joined ranks to
// `merged`: across nodes no one daemon knows every rank's submissions (a
// node announces a tensor once all its local ranks submitted it).
void Merge(v1::StatusResponse& merged, const v1::StatusResponse& other) {
  for (const v1::PendingTensor& tensor : other.pending()) {
    v1::PendingTensor* same = nullptr;
    for (v1::PendingTensor& mine : *merged.mutable_pending()) {
      if (mine.name() == tensor.name() && mine.process_set_id() == tensor.process_set_id()) {
        same = &mine;
      }
    }
    if (same == nullptr) {
      *merged.add_pending() = tensor;
      continue;
    }
    for (int32_t rank : tensor.ready_ranks()) {
      if (std::find(same->ready_ranks().begin(), same->ready_ranks().end(), rank) ==
          same->ready_ranks().end()) {
        same->add_ready_ranks(rank);
      }
    }
  }
  for (int32_t rank : other.joined_ranks()) {
    if (std::find(merged.joined_ranks().begin(), merged.joined_ranks().end(), rank) ==
        merged.joined_ranks().end()) {
      merged.add_joined_ranks(rank);
    }
  }
}

}  // namespace

absl::StatusOr<v1::StatusResponse> DaemonStatus() {
  // COLLECTIVE_TEST_SOCKETS (a multi-node test): every node's daemon,
  // merged; else this rank's own daemon.
  static const std::vector<std::unique_ptr<v1::CollectiveService::Stub>> stubs = [] {
    std::vector<std::unique_ptr<v1::CollectiveService::Stub>> made;
    const char* every = std::getenv("COLLECTIVE_TEST_SOCKETS");
    const char* own = std::getenv("COLLECTIVE_SOCKET");
    if (every != nullptr) {
      for (absl::string_view socket : absl::StrSplit(every, ',', absl::SkipEmpty())) {
        made.push_back(StubFor(std::string(socket)));
      }
    } else if (own != nullptr) {
      made.push_back(StubFor(own));
    } else {
      Die("COLLECTIVE_SOCKET is not set");
    }
    return made;
  }();
  absl::StatusOr<v1::StatusResponse> merged = StatusOf(*stubs.front());
  for (size_t i = 1; merged.ok() && i < stubs.size(); ++i) {
    absl::StatusOr<v1::StatusResponse> other = StatusOf(*stubs[i]);
    if (!other.ok()) return other.status();
    Merge(*merged, *other);
  }
  return merged;
}

void PauseBeforeNextPoll() {
  // Polling against a deadline; the pause leaves the CPU to the ranks and
  // the daemon that make the awaited state happen.
  absl::SleepFor(absl::Milliseconds(2));
}

bool Pending(const v1::StatusResponse& status, const std::string& name, int ready,
             int32_t process_set) {
  for (const v1::PendingTensor& tensor : status.pending()) {
    if (tensor.name() == name && tensor.process_set_id() == process_set &&
        tensor.ready_ranks_size() == ready) {
      return true;
    }
  }
  return false;
}

bool AnyPending(const v1::StatusResponse& status, const std::string& name) {
  for (const v1::PendingTensor& tensor : status.pending()) {
    if (tensor.name() == name) return true;
  }
  return false;
}

}  // namespace collective::testing
