// The collectives collective-bench measures, what each rank puts in and must
// get back, and how bandwidth is counted (the nccl-tests conventions).
//
// A sweep point's size is the bytes each rank puts in: n float32 elements.
// Rank r's element e is (r + 1)·(block + 1), where the input is cut into K
// blocks of n/K elements for alltoall, reducescatter and scatter (block =
// e / (n/K): the block sent to rank `block`, or the block of the sum rank
// `block` keeps) and is one block otherwise. The rooted collectives (reduce,
// gather, scatter) have the root kBroadcastRoot; a scatter's other ranks
// put in nothing. The first element of every block is
// also multiplied by 1, 2, 4 or 8 from one iteration to the next, so that a
// result not recomputed cannot pass the check; every value and every sum
// stays an exact float32 integer for the ranks one node can hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collective/types.h"

namespace collective::bench {

// kSend: a ping-pong between two ranks (rank 0 sends, rank 1 receives and
// sends back its own input); a sample is the round trip.
enum class Collective {
  kAllreduce,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReducescatter,
  kReduce,
  kGather,
  kScatter,
  kSend
};

// Broadcasts come from this rank, in collectived and in MPI_Bcast; it is
// the root of reduce, gather and scatter too.
inline constexpr int kBroadcastRoot = 0;

const char* CollectiveName(Collective collective);
// The collectives by name, in the order --help lists them.
const std::vector<std::pair<std::string, Collective>>& CollectiveNames();

// Allreduce, reducescatter and reduce reduce (sum or average); the others
// move data.
bool Reduces(Collective collective);
// Alltoall, reducescatter and scatter cut the input into one block per
// rank: the element count must divide by the ranks.
bool SplitsInput(Collective collective);

// The bytes algbw counts for a per-rank input of `input_bytes`: what each
// rank ends up with, as nccl-tests counts it (allgather and gather, at the
// root: K·n; send: 2·n, a message each way in a round trip; the others n:
// scatter's root sends n).
uint64_t AlgorithmBytes(Collective collective, uint64_t input_bytes, int ranks);
// busbw / algbw: 2(K−1)/K for allreduce, (K−1)/K for allgather, alltoall,
// reducescatter, gather and scatter, 1 for broadcast, reduce and send.
double BusFactor(Collective collective, int ranks);

// The data of one tensor of one rank (see the top of this file).
class Pattern {
 public:
  Pattern(Collective collective, ReduceOp op, int ranks, int rank, size_t elements);

  size_t input_elements() const { return elements_; }
  // The elements this rank receives: K·n for allgather (and gather's
  // root), n/K for reducescatter and scatter, n for allreduce, broadcast,
  // alltoall and reduce's root, none for reduce's and gather's other ranks.
  size_t output_elements() const;

  // Writes the whole input as of `iteration`.
  void Fill(float* input, int iteration) const;
  // Rewrites what changes from one iteration to the next, and the elements
  // that Check reads back (an in-place broadcast overwrites them), so that
  // a collective that did nothing cannot pass.
  void Prepare(float* input, int iteration) const;
  // Reads the first, middle and last element of every block this rank
  // received; an error names the tensor, the element and the values.
  absl::Status Check(const float* output, size_t elements, int iteration,
                     absl::string_view name) const;

 private:
  // Elements per block of the input.
  size_t block() const;
  float Input(int rank, size_t element, int iteration) const;
  float Expected(size_t element, int iteration) const;
  // Elements per block of the output, whose first, middle and last are checked.
  size_t OutputBlock() const;

  Collective collective_;
  ReduceOp op_;
  int ranks_;
  int rank_;
  size_t elements_;
};

}  // namespace collective::bench
