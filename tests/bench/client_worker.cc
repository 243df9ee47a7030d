#include "tests/bench/client_worker.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "collective/client.h"
#include "common/status_macros.h"
#include "examples/workload.h"
#include "tests/bench/samples.h"

namespace collective::bench {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NanosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

// Rank r contributes r + 1 everywhere: sums and averages stay exact in float32.
float Contribution(int rank) { return static_cast<float>(rank + 1); }

// Element 0 of every input changes from one iteration to the next, so that a
// result not recomputed cannot pass the check.
float IterationScale(int iteration) { return static_cast<float>(1 + iteration % 4); }

float Expected(ReduceOp op, int size) {
  const float sum = static_cast<float>(size) * static_cast<float>(size + 1) / 2;
  return op == ReduceOp::kAverage ? sum / static_cast<float>(size) : sum;
}

// A float32 tensor placed as the run asks: private input and output vectors
// (the library copies in and out), or a block of the arena whose result is
// read in place.
class PlacedTensor {
 public:
  static absl::StatusOr<PlacedTensor> Create(Client& client, Placement placement, size_t elements,
                                             float value) {
    PlacedTensor tensor;
    if (placement == Placement::kCopy) {
      tensor.input_.assign(elements, value);
      tensor.output_.assign(elements, 0.0f);
      tensor.data_ = tensor.input_.data();
      tensor.output_data_ = tensor.output_.data();
    } else {
      ASSIGN_OR_RETURN(tensor.arena_, client.Allocate(elements * sizeof(float)));
      tensor.data_ = static_cast<float*>(tensor.arena_.data());
      std::fill(tensor.data_, tensor.data_ + elements, value);
    }
    return tensor;
  }

  const float* data() const { return data_; }
  float* mutable_data() { return data_; }
  // Where Wait copies the result; null to get a view of it.
  void* output() const { return output_data_; }

 private:
  std::vector<float> input_;
  std::vector<float> output_;
  Buffer arena_;
  float* data_ = nullptr;
  float* output_data_ = nullptr;
};

class ClientBench {
 public:
  ClientBench(Client& client, const BenchOptions& options)
      : client_(client),
        options_(options),
        placement_(options.placements.front()),
        expected_(Expected(options.op, client.size())) {}

  absl::Status Run(BenchMode mode) {
    ASSIGN_OR_RETURN(barrier_, PlacedTensor::Create(client_, Placement::kCopy, 1, 0.0f));
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
  absl::StatusOr<PlacedTensor> Place(size_t elements) {
    return PlacedTensor::Create(client_, placement_, elements, Contribution(client_.rank()));
  }

  // Sets the input's first element for `iteration` (see IterationScale).
  void Prepare(PlacedTensor& tensor, int iteration) const {
    tensor.mutable_data()[0] = Contribution(client_.rank()) * IterationScale(iteration);
  }

  absl::StatusOr<Client::Handle> Submit(const std::string& name, const PlacedTensor& tensor,
                                        const std::vector<int64_t>& shape) {
    return client_.AllreduceAsync(name, {tensor.data(), DataType::kFloat32, shape}, tensor.output(),
                                  {.op = options_.op});
  }

  // Every rank leaves this together (give or take a wake-up), so that a timed
  // step starts on all ranks at once.
  absl::Status Barrier() {
    ASSIGN_OR_RETURN(const Client::Handle handle, Submit("bench.barrier", barrier_, {1}));
    return client_.Wait(handle).status();
  }

  // Three elements of every result, read after the clock has stopped.
  absl::Status Check(const Result& result, const std::string& name, int iteration) const {
    const auto* values = static_cast<const float*>(result.data());
    const size_t count = result.bytes() / sizeof(float);
    if (count == 0) return absl::DataLossError(absl::StrCat("empty result of ", name));
    for (const size_t i : {size_t{0}, count / 2, count - 1}) {
      const float expected = i == 0 ? expected_ * IterationScale(iteration) : expected_;
      if (std::fabs(values[i] - expected) > 1e-6f * std::fabs(expected)) {
        return absl::DataLossError(absl::StrCat("wrong result in iteration ", iteration, ": ", name,
                                                "[", i, "] = ", values[i], ", expected ",
                                                expected));
      }
    }
    return absl::OkStatus();
  }

  static void Emit(const std::string& key, const std::vector<int64_t>& nanos) {
    const std::string line = FormatSeries(key, nanos);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  }

  absl::Status Sweep() {
    for (const uint64_t bytes : SweepSizes(options_)) {
      const size_t elements = bytes / sizeof(float);
      ASSIGN_OR_RETURN(PlacedTensor tensor, Place(elements));
      const std::string name = SweepKey(bytes);
      const std::vector<int64_t> shape = {static_cast<int64_t>(elements)};
      const int timed = SweepIterations(options_, bytes);
      const int warmup = WarmupIterations(timed);
      std::vector<int64_t> nanos;
      for (int i = 0; i < warmup + timed; ++i) {
        Prepare(tensor, i);
        RETURN_IF_ERROR(Barrier());
        const auto start = Clock::now();
        ASSIGN_OR_RETURN(const Client::Handle handle, Submit(name, tensor, shape));
        ASSIGN_OR_RETURN(const Result result, client_.Wait(handle));
        const int64_t elapsed = NanosSince(start);
        RETURN_IF_ERROR(Check(result, name, i));
        if (i >= warmup) nanos.push_back(elapsed);
      }
      Emit(name, nanos);
    }
    return absl::OkStatus();
  }

  // One data-parallel step: every gradient submitted as the backward pass
  // would, then all of them waited for; views are held to the end of the
  // step, as an optimizer reading them would.
  absl::Status Resnet() {
    ASSIGN_OR_RETURN(const auto workload, examples::LoadWorkload(options_.workload));
    std::vector<PlacedTensor> tensors;
    for (const auto& gradient : workload) {
      ASSIGN_OR_RETURN(PlacedTensor tensor, Place(static_cast<size_t>(gradient.elements)));
      tensors.push_back(std::move(tensor));
    }
    const int warmup = WarmupIterations(options_.steps);
    std::vector<int64_t> nanos;
    std::vector<Client::Handle> handles(workload.size());
    std::vector<Result> results(workload.size());
    for (int step = 0; step < warmup + options_.steps; ++step) {
      for (PlacedTensor& tensor : tensors) Prepare(tensor, step);
      RETURN_IF_ERROR(Barrier());
      const auto start = Clock::now();
      for (size_t t = 0; t < workload.size(); ++t) {
        ASSIGN_OR_RETURN(handles[t], Submit(workload[t].name, tensors[t], workload[t].shape));
      }
      for (size_t t = 0; t < workload.size(); ++t) {
        ASSIGN_OR_RETURN(results[t], client_.Wait(handles[t]));
      }
      const int64_t elapsed = NanosSince(start);
      for (size_t t = 0; t < workload.size(); ++t) {
        RETURN_IF_ERROR(Check(results[t], workload[t].name, step));
      }
      for (Result& result : results) result.Release();
      if (step >= warmup) nanos.push_back(elapsed);
    }
    Emit(kResnetKey, nanos);
    return absl::OkStatus();
  }

  // Back to back: each allreduce already waits for every rank.
  absl::Status Latency() {
    ASSIGN_OR_RETURN(PlacedTensor tensor, Place(1));
    const std::vector<int64_t> shape = {1};
    const int warmup = WarmupIterations(options_.latency_iterations);
    std::vector<int64_t> nanos;
    nanos.reserve(static_cast<size_t>(options_.latency_iterations));
    for (int i = 0; i < warmup + options_.latency_iterations; ++i) {
      Prepare(tensor, i);
      const auto start = Clock::now();
      ASSIGN_OR_RETURN(const Client::Handle handle, Submit(kLatencyKey, tensor, shape));
      ASSIGN_OR_RETURN(const Result result, client_.Wait(handle));
      const int64_t elapsed = NanosSince(start);
      RETURN_IF_ERROR(Check(result, kLatencyKey, i));
      if (i >= warmup) nanos.push_back(elapsed);
    }
    Emit(kLatencyKey, nanos);
    return absl::OkStatus();
  }

  Client& client_;
  const BenchOptions& options_;
  const Placement placement_;
  const float expected_;
  PlacedTensor barrier_;
};

}  // namespace

int RunClientWorker(const BenchOptions& options) {
  // A worker outliving its launcher would hold the job (and a core) forever.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (options.parent > 0 && ::getppid() != options.parent) return 1;
  auto client = Client::Connect();
  if (!client.ok()) {
    std::fprintf(stderr, "collective-bench: client worker %d cannot connect: %s\n", options.rank,
                 client.status().ToString().c_str());
    return 1;
  }
  ClientBench bench(**client, options);
  absl::Status status = bench.Run(options.modes.front());
  if (status.ok()) status = (*client)->Close();
  if (!status.ok()) {
    std::fprintf(stderr, "collective-bench: client worker %d (%s, %s): %s\n", options.rank,
                 ModeName(options.modes.front()), PlacementName(options.placements.front()),
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace collective::bench
