// Negotiation: the table of tensors that some ranks have submitted and others
// not yet. A tensor is ready when every member rank submitted it; ready
// tensors come out in the order they became ready, which is the order the
// executor runs them in.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "collective/v1/status.pb.h"
#include "collective/v1/types.pb.h"
#include "daemon/client_record.h"

namespace collective::daemon {

struct Submission {
  ClientRecord* client = nullptr;
  v1::TensorRequest request;
  std::chrono::steady_clock::time_point at;
};

struct PendingTensor {
  std::string name;
  int32_t process_set_id = 0;
  std::chrono::steady_clock::time_point first_at;
  std::vector<std::optional<Submission>> by_rank;
  int32_t submitted = 0;
};

// A tensor every member rank submitted: one collective to run.
struct ReadyTensor {
  std::string name;
  std::vector<Submission> submissions;  // in rank order
};

class Coordinator {
 public:
  explicit Coordinator(int32_t size) : size_(size) {}

  // Records `submission` for `rank`. ALREADY_EXISTS when that rank already
  // has a request outstanding under the same name.
  absl::Status Add(int32_t rank, Submission submission);

  std::vector<ReadyTensor> TakeReady();
  // Empties the table (the job failed): the caller fails every submission.
  std::vector<PendingTensor> TakeAllPending();

  bool idle() const { return table_.empty() && ready_.empty(); }
  void Describe(std::chrono::steady_clock::time_point now,
                google::protobuf::RepeatedPtrField<v1::PendingTensor>* out) const;

 private:
  using Key = std::pair<int32_t, std::string>;  // process set, name

  int32_t size_;
  absl::flat_hash_map<Key, PendingTensor> table_;
  std::vector<ReadyTensor> ready_;
};

}  // namespace collective::daemon
