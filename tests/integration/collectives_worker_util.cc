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

absl::StatusOr<v1::StatusResponse> DaemonStatus() {
  static const std::unique_ptr<v1::CollectiveService::Stub> stub = [] {
    const char* socket = std::getenv("COLLECTIVE_SOCKET");
    if (socket == nullptr) Die("COLLECTIVE_SOCKET is not set");
    return v1::CollectiveService::NewStub(
        grpc::CreateChannel(std::string("unix:") + socket, grpc::InsecureChannelCredentials()));
  }();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StatusResponse response;
  const grpc::Status status = stub->Status(&context, {}, &response);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  return response;
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
