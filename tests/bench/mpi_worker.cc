#include "tests/bench/mpi_worker.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <mpi.h>

#include "absl/strings/str_cat.h"
#include "examples/workload.h"
#include "tests/bench/collectives.h"
#include "tests/bench/samples.h"

namespace collective::bench {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NanosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

class MpiBench {
 public:
  explicit MpiBench(const BenchOptions& options) : options_(options) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

  absl::Status Run(BenchMode mode) {
    switch (mode) {
      case BenchMode::kSweep:
        return Sweep();
      case BenchMode::kResnet:
        return Resnet();
      case BenchMode::kLatency:
        return Latency();
    }
    return absl::InvalidArgumentError("unknown mode");
  }

 private:
  // An average divides the sum afterwards, as Horovod's MPI path does.
  void Average(std::vector<float>& tensor) const {
    if (options_.reduce_op != ReduceOp::kAverage) return;
    const float scale = 1.0f / static_cast<float>(size_);
    for (float& value : tensor) value *= scale;
  }

  // In place, as Horovod does it.
  void Allreduce(std::vector<float>& tensor) const {
    MPI_Allreduce(MPI_IN_PLACE, tensor.data(), static_cast<int>(tensor.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    Average(tensor);
  }

  // The sweep's other collectives: out of place, except broadcast, which
  // overwrites the input of every rank but the root.
  void RunCollective(std::vector<float>& input, std::vector<float>& output) const {
    const int count = static_cast<int>(input.size());
    const int block = count / size_;
    switch (options_.collective) {
      case Collective::kAllreduce:
        Allreduce(input);
        return;
      case Collective::kAllgather:
        MPI_Allgather(input.data(), count, MPI_FLOAT, output.data(), count, MPI_FLOAT,
                      MPI_COMM_WORLD);
        return;
      case Collective::kBroadcast:
        MPI_Bcast(input.data(), count, MPI_FLOAT, kBroadcastRoot, MPI_COMM_WORLD);
        return;
      case Collective::kAlltoall:
        MPI_Alltoall(input.data(), block, MPI_FLOAT, output.data(), block, MPI_FLOAT,
                     MPI_COMM_WORLD);
        return;
      case Collective::kReducescatter:
        MPI_Reduce_scatter_block(input.data(), output.data(), block, MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD);
        Average(output);
        return;
      case Collective::kReduce:
        MPI_Reduce(input.data(), output.data(), count, MPI_FLOAT, MPI_SUM, kBroadcastRoot,
                   MPI_COMM_WORLD);
        Average(output);  // the root's; the others' is empty
        return;
      case Collective::kGather: {
        // The v-variants, as a gather of rows that may differ per rank
        // needs (here they do not, so that both sides move the same bytes).
        const std::vector<int> counts(static_cast<size_t>(size_), count);
        std::vector<int> displs(static_cast<size_t>(size_));
        for (int r = 0; r < size_; ++r) displs[r] = r * count;
        MPI_Gatherv(input.data(), count, MPI_FLOAT, output.data(), counts.data(), displs.data(),
                    MPI_FLOAT, kBroadcastRoot, MPI_COMM_WORLD);
        return;
      }
      case Collective::kScatter: {
        const std::vector<int> counts(static_cast<size_t>(size_), block);
        std::vector<int> displs(static_cast<size_t>(size_));
        for (int r = 0; r < size_; ++r) displs[r] = r * block;
        MPI_Scatterv(input.data(), counts.data(), displs.data(), MPI_FLOAT, output.data(), block,
                     MPI_FLOAT, kBroadcastRoot, MPI_COMM_WORLD);
        return;
      }
      case Collective::kSend:
        // The ping-pong of two ranks (the options allow no more).
        if (rank_ == 0) {
          MPI_Send(input.data(), count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
          MPI_Recv(output.data(), count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(output.data(), count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(input.data(), count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
        }
        return;
    }
  }

  // Filled with rank + 1 and checked after the first reduction; then zeroed,
  // since in-place sums would otherwise grow to infinity step after step.
  std::vector<float> Tensor(size_t elements) const {
    return std::vector<float>(elements, static_cast<float>(rank_ + 1));
  }

  absl::Status CheckAndClear(std::vector<float>& tensor, const std::string& name) {
    const float sum = static_cast<float>(size_) * static_cast<float>(size_ + 1) / 2;
    const float expected =
        options_.reduce_op == ReduceOp::kAverage ? sum / static_cast<float>(size_) : sum;
    for (size_t i : {size_t{0}, tensor.size() / 2, tensor.size() - 1}) {
      if (std::fabs(tensor[i] - expected) > 1e-6f * expected) {
        return absl::DataLossError(absl::StrCat("MPI gave a wrong result: ", name, "[", i,
                                                "] = ", tensor[i], ", expected ", expected));
      }
    }
    std::fill(tensor.begin(), tensor.end(), 0.0f);
    ++checked_;
    return absl::OkStatus();
  }

  // The slowest rank's time of every iteration, written by rank 0, with the
  // number of ranks that checked a result of the series (a rank whose check
  // failed has aborted the job instead).
  void Emit(const std::string& key, const std::vector<int64_t>& nanos) {
    std::vector<int64_t> slowest(nanos.size());
    MPI_Reduce(nanos.data(), slowest.data(), static_cast<int>(nanos.size()), MPI_INT64_T, MPI_MAX,
               0, MPI_COMM_WORLD);
    const int verified = checked_ > 0 ? 1 : 0;
    checked_ = 0;
    int verified_ranks = 0;
    MPI_Reduce(&verified, &verified_ranks, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank_ != 0) return;
    const std::string line = FormatSeries(key, verified_ranks, slowest);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  }

  absl::Status Sweep() {
    if (options_.collective != Collective::kAllreduce) return CollectiveSweep();
    for (const uint64_t bytes : SweepSizes(options_)) {
      std::vector<float> tensor = Tensor(bytes / sizeof(float));
      const std::string name = SweepKey(bytes);
      const int timed = SweepIterations(options_, bytes);
      const int warmup = WarmupIterations(timed);
      std::vector<int64_t> nanos;
      for (int i = 0; i < warmup + timed; ++i) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto start = Clock::now();
        Allreduce(tensor);
        const int64_t elapsed = NanosSince(start);
        if (i == 0) {
          if (absl::Status checked = CheckAndClear(tensor, name); !checked.ok()) return checked;
        }
        if (i >= warmup) nanos.push_back(elapsed);
      }
      Emit(name, nanos);
    }
    return absl::OkStatus();
  }

  // Every result is checked after the clock stops, as the client workers do;
  // the inputs are out of place (or, for broadcast, rewritten where checked)
  // and so do not grow from one iteration to the next.
  absl::Status CollectiveSweep() {
    for (const uint64_t bytes : SweepSizes(options_)) {
      const Pattern pattern(options_.collective, options_.reduce_op, size_, rank_,
                            bytes / sizeof(float));
      std::vector<float> input(pattern.input_elements());
      pattern.Fill(input.data(), 0);
      const bool in_place = options_.collective == Collective::kBroadcast;
      std::vector<float> output(in_place ? 0 : pattern.output_elements());
      const std::string name = SweepKey(bytes);
      const int timed = SweepIterations(options_, bytes);
      const int warmup = WarmupIterations(timed);
      std::vector<int64_t> nanos;
      for (int i = 0; i < warmup + timed; ++i) {
        pattern.Prepare(input.data(), i);
        MPI_Barrier(MPI_COMM_WORLD);
        const auto start = Clock::now();
        RunCollective(input, output);
        const int64_t elapsed = NanosSince(start);
        const std::vector<float>& result = in_place ? input : output;
        if (absl::Status checked = pattern.Check(result.data(), result.size(), i, name);
            !checked.ok()) {
          return absl::DataLossError(absl::StrCat("MPI gave a ", checked.message()));
        }
        ++checked_;
        if (i >= warmup) nanos.push_back(elapsed);
      }
      Emit(name, nanos);
    }
    return absl::OkStatus();
  }

  absl::Status Resnet() {
    auto workload = examples::LoadWorkload(options_.workload);
    if (!workload.ok()) return workload.status();
    std::vector<std::vector<float>> tensors;
    for (const auto& gradient : *workload) {
      tensors.push_back(Tensor(static_cast<size_t>(gradient.elements)));
    }
    const int warmup = WarmupIterations(options_.steps);
    std::vector<int64_t> nanos;
    for (int step = 0; step < warmup + options_.steps; ++step) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto start = Clock::now();
      for (auto& tensor : tensors) Allreduce(tensor);
      const int64_t elapsed = NanosSince(start);
      for (size_t t = 0; step == 0 && t < tensors.size(); ++t) {
        if (absl::Status checked = CheckAndClear(tensors[t], (*workload)[t].name); !checked.ok()) {
          return checked;
        }
      }
      if (step >= warmup) nanos.push_back(elapsed);
    }
    Emit(kResnetKey, nanos);
    return absl::OkStatus();
  }

  absl::Status Latency() {
    std::vector<float> tensor = Tensor(1);
    const int warmup = WarmupIterations(options_.latency_iterations);
    std::vector<int64_t> nanos;
    nanos.reserve(static_cast<size_t>(options_.latency_iterations));
    for (int i = 0; i < warmup + options_.latency_iterations; ++i) {
      const auto start = Clock::now();
      Allreduce(tensor);
      const int64_t elapsed = NanosSince(start);
      if (i == 0) {
        if (absl::Status checked = CheckAndClear(tensor, kLatencyKey); !checked.ok())
          return checked;
      }
      if (i >= warmup) nanos.push_back(elapsed);
    }
    Emit(kLatencyKey, nanos);
    return absl::OkStatus();
  }

  const BenchOptions& options_;
  int rank_ = 0;
  int size_ = 1;
  int64_t checked_ = 0;  // results of the current series
};

}  // namespace

int RunMpiWorker(const BenchOptions& options) {
  MPI_Init(nullptr, nullptr);
  MpiBench bench(options);
  const absl::Status status = bench.Run(options.modes.front());
  if (!status.ok()) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "collective-bench: MPI rank %d (%s): %s\n", rank,
                 ModeName(options.modes.front()), status.ToString().c_str());
    // The other ranks wait in a collective that will never complete.
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}

}  // namespace collective::bench
