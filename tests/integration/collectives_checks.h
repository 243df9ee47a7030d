// Checked collectives for the collectives worker: each Prepare* computes one
// rank's input and the exact result it must receive (from every member's
// deterministic data, with the reference reduction where there is one),
// places the input as asked (private memory or the client's arena) and
// names the output (a private buffer, the input itself, or none for a view).
// Submit* prepares and submits; Check waits and compares bitwise. Grouped
// and many-outstanding scenarios prepare several and submit them together.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collective/client.h"
#include "collective/v1/types.pb.h"

namespace collective::testing {

// The ranks of a collective: a process set, its members (global ranks, in
// set-rank order) and this rank's position among them.
struct Team {
  int32_t set = kGlobalProcessSet;
  std::vector<int> members;
  int me = 0;

  int size() const { return static_cast<int>(members.size()); }
};
Team GlobalTeam(const Client& client);
Team TeamOf(const Client& client, const ProcessSet& set);

// Where the result goes.
enum class Out {
  kView,     // no output: Wait returns a view of shared memory
  kCopy,     // a private output buffer
  kInPlace,  // the input is the output
};

struct ReduceCase {
  std::string name;
  v1::DataType dtype = v1::DATA_TYPE_FLOAT32;
  v1::ReduceOp op = v1::REDUCE_OP_SUM;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  bool arena = false;
  Out out = Out::kView;
  // Set ranks whose contribution is zeros (they have joined).
  std::vector<int> zero_members;
};

struct GatherCase {
  std::string name;
  v1::DataType dtype = v1::DATA_TYPE_FLOAT32;
  std::vector<int64_t> rows;  // by set rank
  std::vector<int64_t> trailing;
  bool arena = false;
};

struct BroadcastCase {
  std::string name;
  v1::DataType dtype = v1::DATA_TYPE_FLOAT32;
  std::vector<int64_t> shape;
  int root = 0;  // set rank
  bool arena = false;
  Out out = Out::kView;
};

struct AlltoallCase {
  std::string name;
  v1::DataType dtype = v1::DATA_TYPE_FLOAT32;
  // splits[from][to]: rows set rank `from` sends to set rank `to`.
  std::vector<std::vector<int64_t>> splits;
  std::vector<int64_t> trailing;
  bool pass_splits = true;  // false: the even split, no splits given
  bool arena = false;
};

// A collective prepared (and, once `handle` is set, submitted) by this rank,
// with the storage it needs until the check.
struct Submitted {
  std::string name;
  std::string label;  // for messages: collective, dtype, placement
  Client::Handle handle = 0;
  v1::DataType dtype = v1::DATA_TYPE_FLOAT32;
  std::vector<std::byte> expected;
  std::vector<int64_t> expected_shape;
  std::optional<std::vector<int64_t>> expected_splits;

  TensorView view;
  void* output = nullptr;
  std::vector<std::byte> private_input;
  Buffer arena_input;
  std::vector<std::byte> output_buffer;
  // Broadcast out of place: the input must come back untouched.
  std::optional<std::vector<std::byte>> untouched;
  // A reduction: across nodes, compared within rounding (see
  // CompareReductionsClosely).
  bool reduced = false;
};

// Across nodes each node reduces its own ranks first and the nodes then
// combine their partial results, so floating-point reductions may differ
// from the single-node reference in the last bits: compare them within a
// tolerance. Copies (allgather, broadcast, alltoall) stay bitwise.
void CompareReductionsClosely(bool closely);

Submitted PrepareAllreduce(Client& client, const Team& team, const ReduceCase& c);
Submitted PrepareReducescatter(Client& client, const Team& team, const ReduceCase& c);
Submitted PrepareAllgather(Client& client, const Team& team, const GatherCase& c);
Submitted PrepareBroadcast(Client& client, const Team& team, const BroadcastCase& c);
Submitted PrepareAlltoall(Client& client, const Team& team, const AlltoallCase& c);

Submitted SubmitAllreduce(Client& client, const Team& team, const ReduceCase& c);
Submitted SubmitReducescatter(Client& client, const Team& team, const ReduceCase& c);
Submitted SubmitAllgather(Client& client, const Team& team, const GatherCase& c);
Submitted SubmitBroadcast(Client& client, const Team& team, const BroadcastCase& c);
Submitted SubmitAlltoall(Client& client, const Team& team, const AlltoallCase& c);

// Waits and compares; dies with the case's label and the first difference.
void Check(Client& client, Submitted& submitted);

// The usual uneven splits: set rank 1 sends nothing, set rank 2 receives
// nothing (where they exist), the rest vary around `base` rows.
std::vector<std::vector<int64_t>> UnevenSplits(int size, int64_t base);
std::vector<std::vector<int64_t>> EvenSplits(int size, int64_t rows_each);

// One of every collective within `team` (names start with `tag`), each
// checked, then a barrier: that the team works.
void EveryCollective(Client& client, const Team& team, const std::string& tag);

}  // namespace collective::testing
