#include "tests/bench/collectives.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace collective::bench {
namespace {

// 1, 2, 4, 8: powers of two keep every product and sum exact.
float IterationScale(int iteration) { return static_cast<float>(1 << (iteration % 4)); }

}  // namespace

const char* CollectiveName(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kAlltoall:
      return "alltoall";
    case Collective::kReducescatter:
      return "reducescatter";
    case Collective::kReduce:
      return "reduce";
    case Collective::kGather:
      return "gather";
    case Collective::kScatter:
      return "scatter";
    case Collective::kSend:
      return "send";
  }
  return "?";
}

const std::vector<std::pair<std::string, Collective>>& CollectiveNames() {
  static const auto* const names = new std::vector<std::pair<std::string, Collective>>{
      {"allreduce", Collective::kAllreduce},
      {"allgather", Collective::kAllgather},
      {"broadcast", Collective::kBroadcast},
      {"alltoall", Collective::kAlltoall},
      {"reducescatter", Collective::kReducescatter},
      {"reduce", Collective::kReduce},
      {"gather", Collective::kGather},
      {"scatter", Collective::kScatter},
      {"send", Collective::kSend}};
  return *names;
}

bool Reduces(Collective collective) {
  return collective == Collective::kAllreduce || collective == Collective::kReducescatter ||
         collective == Collective::kReduce;
}

bool SplitsInput(Collective collective) {
  return collective == Collective::kAlltoall || collective == Collective::kReducescatter ||
         collective == Collective::kScatter;
}

uint64_t AlgorithmBytes(Collective collective, uint64_t input_bytes, int ranks) {
  if (collective == Collective::kSend) return 2 * input_bytes;
  const bool gathers = collective == Collective::kAllgather || collective == Collective::kGather;
  return gathers ? input_bytes * static_cast<uint64_t>(ranks) : input_bytes;
}

double BusFactor(Collective collective, int ranks) {
  const double k = std::max(ranks, 1);
  switch (collective) {
    case Collective::kAllreduce:
      return 2.0 * (k - 1) / k;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSend:
      return 1.0;
    case Collective::kAllgather:
    case Collective::kAlltoall:
    case Collective::kReducescatter:
    case Collective::kGather:
    case Collective::kScatter:
      return (k - 1) / k;
  }
  return 1.0;
}

Pattern::Pattern(Collective collective, ReduceOp op, int ranks, int rank, size_t elements)
    : collective_(collective), op_(op), ranks_(ranks), rank_(rank), elements_(elements) {}

size_t Pattern::block() const {
  return SplitsInput(collective_) ? elements_ / static_cast<size_t>(ranks_) : elements_;
}

size_t Pattern::output_elements() const {
  const bool root = rank_ == kBroadcastRoot;
  switch (collective_) {
    case Collective::kAllgather:
      return elements_ * static_cast<size_t>(ranks_);
    case Collective::kReducescatter:
    case Collective::kScatter:
      return block();
    case Collective::kReduce:
      return root ? elements_ : 0;
    case Collective::kGather:
      return root ? elements_ * static_cast<size_t>(ranks_) : 0;
    case Collective::kAllreduce:
    case Collective::kBroadcast:
    case Collective::kAlltoall:
    case Collective::kSend:
      return elements_;
  }
  return elements_;
}

size_t Pattern::OutputBlock() const {
  switch (collective_) {
    case Collective::kAllgather:
    case Collective::kGather:
      return elements_;
    case Collective::kAlltoall:
      return block();
    case Collective::kAllreduce:
    case Collective::kBroadcast:
    case Collective::kReducescatter:
    case Collective::kReduce:
    case Collective::kScatter:
    case Collective::kSend:
      return output_elements();
  }
  return output_elements();
}

float Pattern::Input(int rank, size_t element, int iteration) const {
  const size_t b = block();
  const auto value = static_cast<float>((rank + 1) * static_cast<int64_t>(element / b + 1));
  return element % b == 0 ? value * IterationScale(iteration) : value;
}

void Pattern::Fill(float* input, int iteration) const {
  const size_t b = block();
  for (size_t first = 0; first < elements_; first += b) {
    const auto value = static_cast<float>((rank_ + 1) * static_cast<int64_t>(first / b + 1));
    std::fill(input + first, input + first + b, value);
    input[first] = Input(rank_, first, iteration);
  }
}

void Pattern::Prepare(float* input, int iteration) const {
  const size_t b = block();
  for (size_t first = 0; first < elements_; first += b) {
    input[first] = Input(rank_, first, iteration);
  }
  for (const size_t i : {elements_ / 2, elements_ - 1}) input[i] = Input(rank_, i, iteration);
}

float Pattern::Expected(size_t element, int iteration) const {
  const size_t n = elements_;
  const size_t b = block();
  switch (collective_) {
    case Collective::kAllgather:
    case Collective::kGather:
      return Input(static_cast<int>(element / n), element % n, iteration);
    case Collective::kScatter:
      // This rank's block of the root's input.
      return Input(kBroadcastRoot, static_cast<size_t>(rank_) * b + element, iteration);
    case Collective::kBroadcast:
      return Input(kBroadcastRoot, element, iteration);
    case Collective::kSend:
      // The other rank of the pair's input.
      return Input(1 - rank_, element, iteration);
    case Collective::kAlltoall:
      // Block q came from rank q: the block of its input meant for this rank.
      return Input(static_cast<int>(element / b), static_cast<size_t>(rank_) * b + element % b,
                   iteration);
    case Collective::kAllreduce:
    case Collective::kReduce:
    case Collective::kReducescatter: {
      // Reducescatter: this rank's block of the reduction.
      const size_t at = collective_ == Collective::kReducescatter
                            ? static_cast<size_t>(rank_) * b + element
                            : element;
      float sum = 0;
      for (int r = 0; r < ranks_; ++r) sum += Input(r, at, iteration);
      return op_ == ReduceOp::kAverage ? sum / static_cast<float>(ranks_) : sum;
    }
  }
  return 0;
}

absl::Status Pattern::Check(const float* output, size_t elements, int iteration,
                            absl::string_view name) const {
  if (elements != output_elements()) {
    return absl::DataLossError(absl::StrCat("wrong result size in iteration ", iteration, ": ",
                                            name, " has ", elements, " elements, expected ",
                                            output_elements()));
  }
  const size_t b = OutputBlock();
  for (size_t first = 0; first < elements; first += b) {
    for (const size_t i : {first, first + b / 2, first + b - 1}) {
      const float expected = Expected(i, iteration);
      if (std::fabs(output[i] - expected) > 1e-6f * std::fabs(expected)) {
        return absl::DataLossError(absl::StrCat("wrong result in iteration ", iteration, ": ", name,
                                                "[", i, "] = ", output[i], ", expected ",
                                                expected));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace collective::bench
