#include "tests/bench/client_worker.h"

#include <chrono>
#include <cstdio>
#include <cstring>
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
#include "tests/bench/collectives.h"
#include "tests/bench/device_memory.h"
#include "tests/bench/samples.h"

namespace collective::bench {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NanosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

// A float32 tensor placed as the run asks: a private input and a private
// output (the library copies in, and copies out where the collective takes an
// output; where it only returns a view, allgather and alltoall, the worker
// copies the view out itself, so that both placements end with the result in
// private memory), a block of the arena whose result is read in place (or,
// inplace, written back into it by the daemon), or
// CUDA memory: an input and an output on the device, with a host copy of
// each that the untimed parts of a step fill and check.
class PlacedTensor {
 public:
  static absl::StatusOr<PlacedTensor> Create(Client& client, Placement placement,
                                             const Pattern& pattern, DeviceMemory* device) {
    PlacedTensor tensor;
    const size_t elements = pattern.input_elements();
    if (placement == Placement::kCuda) {
      tensor.device_ = device;
      tensor.input_.assign(elements, 0.0f);
      tensor.device_output_elements_ = pattern.output_elements();
      ASSIGN_OR_RETURN(tensor.device_input_, device->Allocate(elements * sizeof(float)));
      ASSIGN_OR_RETURN(tensor.device_output_,
                       device->Allocate(tensor.device_output_elements_ * sizeof(float)));
      tensor.data_ = tensor.input_.data();
    } else if (placement == Placement::kCopy) {
      tensor.input_.assign(elements, 0.0f);
      tensor.output_.assign(pattern.output_elements(), 0.0f);
      tensor.data_ = tensor.input_.data();
    } else {
      ASSIGN_OR_RETURN(tensor.arena_, client.Allocate(elements * sizeof(float)));
      tensor.data_ = static_cast<float*>(tensor.arena_.data());
      if (placement == Placement::kInPlace) tensor.in_place_elements_ = elements;
    }
    pattern.Fill(tensor.data_, 0);
    RETURN_IF_ERROR(tensor.Publish());
    return tensor;
  }

  // What a collective reads: the host data, or the device input.
  TensorView Input(const std::vector<int64_t>& shape) const {
    if (device_ == nullptr) return {data_, DataType::kFloat32, shape};
    return {.data = device_input_,
            .dtype = DataType::kFloat32,
            .shape = shape,
            .device = Device::kCuda,
            .cuda_stream = device_->stream()};
  }
  float* mutable_data() { return data_; }
  // After the host data changed: the device input gets it (untimed).
  absl::Status Publish() {
    if (device_ == nullptr) return absl::OkStatus();
    return device_->Upload(device_input_, input_.data(), input_.size() * sizeof(float));
  }
  // The private output (copy placement), the arena block itself (inplace) or
  // the device output; null for the zero-copy placement, whose results are
  // views.
  void* output() {
    if (device_ != nullptr) return device_output_;
    if (in_place_elements_ > 0) return data_;
    return output_.empty() ? nullptr : output_.data();
  }
  size_t output_elements() const {
    if (in_place_elements_ > 0) return in_place_elements_;
    return device_ != nullptr ? device_output_elements_ : output_.size();
  }
  DeviceMemory* device() const { return device_; }
  // The device output's first `elements`, on the host (untimed).
  absl::StatusOr<const float*> Fetch(size_t elements) {
    host_output_.resize(elements);
    RETURN_IF_ERROR(
        device_->Download(host_output_.data(), device_output_, elements * sizeof(float)));
    return host_output_.data();
  }

 private:
  std::vector<float> input_;
  std::vector<float> output_;
  // Inplace: the arena block is the output too.
  size_t in_place_elements_ = 0;
  Buffer arena_;
  float* data_ = nullptr;
  DeviceMemory* device_ = nullptr;
  void* device_input_ = nullptr;
  void* device_output_ = nullptr;
  size_t device_output_elements_ = 0;
  std::vector<float> host_output_;
};

// A result as the timed part ends: the Result (a view, or the output the
// library copied into), and where its elements are.
struct Received {
  Result result;
  const float* data = nullptr;
  size_t elements = 0;
};

class ClientBench {
 public:
  ClientBench(Client& client, const BenchOptions& options, DeviceMemory* device)
      : client_(client),
        options_(options),
        placement_(options.placements.front()),
        device_(device) {}

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
  Pattern MakePattern(Collective collective, size_t elements) const {
    return Pattern(collective, options_.reduce_op, client_.size(), client_.rank(), elements);
  }

  absl::StatusOr<PlacedTensor> Place(const Pattern& pattern) {
    return PlacedTensor::Create(client_, placement_, pattern, device_);
  }

  absl::StatusOr<Client::Handle> Submit(Collective collective, const std::string& name,
                                        PlacedTensor& tensor, const std::vector<int64_t>& shape) {
    const TensorView input = tensor.Input(shape);
    const AllreduceOptions reduction{.op = options_.reduce_op};
    const size_t output_bytes = tensor.output_elements() * sizeof(float);
    switch (collective) {
      case Collective::kAllreduce:
        return client_.AllreduceAsync(name, input, tensor.output(), reduction);
      case Collective::kAllgather:
        if (tensor.device() != nullptr) {
          return client_.AllgatherAsync(name, input, tensor.output(), output_bytes);
        }
        return client_.AllgatherAsync(name, input);
      case Collective::kBroadcast:
        return client_.BroadcastAsync(name, input, tensor.output(), kBroadcastRoot);
      case Collective::kAlltoall:
        if (tensor.device() != nullptr) {
          return client_.AlltoallAsync(name, input, {}, tensor.output(), output_bytes);
        }
        return client_.AlltoallAsync(name, input);
      case Collective::kReducescatter:
        return client_.ReducescatterAsync(name, input, tensor.output(), reduction);
      case Collective::kReduce:
        return client_.ReduceAsync(name, input, tensor.output(), kBroadcastRoot, reduction);
      case Collective::kGather:
        if (tensor.device() != nullptr) {
          return client_.GatherAsync(name, input, kBroadcastRoot, kGlobalProcessSet,
                                     tensor.output(), output_bytes);
        }
        return client_.GatherAsync(name, input, kBroadcastRoot);
      case Collective::kScatter: {
        // The root sends every row, the others none; each receives its
        // even share (a view, copied out as allgather's is).
        TensorView sent = input;
        if (client_.rank() != kBroadcastRoot) sent.shape = {0};
        const int64_t rows = shape.front() / client_.size();
        if (tensor.device() != nullptr) {
          return client_.ScatterAsync(name, sent, rows, kBroadcastRoot, kGlobalProcessSet,
                                      tensor.output(), output_bytes);
        }
        return client_.ScatterAsync(name, sent, rows, kBroadcastRoot);
      }
      case Collective::kSend:
        break;  // PingPong
    }
    return absl::InvalidArgumentError("unknown collective");
  }

  // Waits for `handle`. In the copy placement, a view (allgather, alltoall,
  // gather, scatter)
  // is copied into the tensor's private output and released: part of the
  // timed work, as the library's own copy out is for the other collectives.
  absl::StatusOr<Received> Receive(Client::Handle handle, PlacedTensor& tensor,
                                   const std::string& name) {
    Received received;
    ASSIGN_OR_RETURN(received.result, client_.Wait(handle));
    received.elements = received.result.bytes() / sizeof(float);
    if (tensor.device() != nullptr) return received;  // on the device; see Fetch
    const auto* data = static_cast<const float*>(received.result.data());
    auto* output = static_cast<float*>(tensor.output());
    if (output == nullptr || data == output) {
      received.data = data;
      return received;
    }
    if (received.elements > tensor.output_elements()) {
      return absl::DataLossError(absl::StrCat("the result of ", name, " has ",
                                              received.result.bytes(), " bytes; expected ",
                                              tensor.output_elements() * sizeof(float)));
    }
    std::memcpy(output, data, received.elements * sizeof(float));
    received.result.Release();
    received.data = output;
    return received;
  }

  // One round trip between ranks 0 and 1 (the options allow no more): rank
  // 0 sends its input and receives rank 1's, which receives first and then
  // sends. The send waits until the bytes reached the other rank.
  absl::StatusOr<Received> PingPong(PlacedTensor& tensor, const std::vector<int64_t>& shape,
                                    const std::string& name) {
    const int peer = 1 - client_.rank();
    const TensorView input = tensor.Input(shape);
    const size_t output_bytes = tensor.output_elements() * sizeof(float);
    if (client_.rank() == 0) {
      ASSIGN_OR_RETURN(const Client::Handle sent, client_.SendAsync(input, peer, 0));
      ASSIGN_OR_RETURN(
          const Client::Handle handle,
          client_.RecvAsync(input, peer, 0, kGlobalProcessSet, tensor.output(), output_bytes));
      RETURN_IF_ERROR(client_.Wait(sent).status());
      return Receive(handle, tensor, name);
    }
    ASSIGN_OR_RETURN(
        const Client::Handle handle,
        client_.RecvAsync(input, peer, 0, kGlobalProcessSet, tensor.output(), output_bytes));
    ASSIGN_OR_RETURN(Received received, Receive(handle, tensor, name));
    ASSIGN_OR_RETURN(const Client::Handle sent, client_.SendAsync(input, peer, 0));
    RETURN_IF_ERROR(client_.Wait(sent).status());
    return received;
  }

  // CUDA tensors: the end of the timed part, once the stream has every
  // result.
  absl::Status Synchronize() {
    return device_ != nullptr ? device_->Synchronize() : absl::OkStatus();
  }

  // CUDA tensors, after the timed part: the result on the host, to check.
  absl::Status Fetch(Received& received, PlacedTensor& tensor) {
    if (tensor.device() == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(received.data, tensor.Fetch(received.elements));
    return absl::OkStatus();
  }

  // Every rank leaves this together (give or take a wake-up), so that a timed
  // step starts on all ranks at once.
  absl::Status Barrier() {
    ASSIGN_OR_RETURN(
        const Client::Handle handle,
        client_.AllreduceAsync("bench.barrier", {&barrier_, DataType::kFloat32, {1}}, &barrier_));
    return client_.Wait(handle).status();
  }

  // Checks one result of the series being measured; Emit says whether all were.
  absl::Status Verify(const Pattern& pattern, const Received& received, int iteration,
                      const std::string& name) {
    RETURN_IF_ERROR(pattern.Check(received.data, received.elements, iteration, name));
    ++checked_;
    return absl::OkStatus();
  }

  // A series and whether this rank checked all its `results` (warmup
  // included); a failed check ends the worker before it gets here.
  void Emit(const std::string& key, const std::vector<int64_t>& nanos, int64_t results) {
    const std::string line = FormatSeries(key, checked_ == results ? 1 : 0, nanos);
    checked_ = 0;
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  }

  absl::Status Sweep() {
    const Collective collective = options_.collective;
    for (const uint64_t bytes : SweepSizes(options_)) {
      const Pattern pattern = MakePattern(collective, bytes / sizeof(float));
      ASSIGN_OR_RETURN(PlacedTensor tensor, Place(pattern));
      const std::string name = SweepKey(bytes);
      const std::vector<int64_t> shape = {static_cast<int64_t>(pattern.input_elements())};
      const int timed = SweepIterations(options_, bytes);
      const int warmup = WarmupIterations(timed);
      std::vector<int64_t> nanos;
      for (int i = 0; i < warmup + timed; ++i) {
        pattern.Prepare(tensor.mutable_data(), i);
        RETURN_IF_ERROR(tensor.Publish());
        RETURN_IF_ERROR(Synchronize());
        RETURN_IF_ERROR(Barrier());
        const auto start = Clock::now();
        Received received;
        if (collective == Collective::kSend) {
          ASSIGN_OR_RETURN(received, PingPong(tensor, shape, name));
        } else {
          ASSIGN_OR_RETURN(const Client::Handle handle, Submit(collective, name, tensor, shape));
          ASSIGN_OR_RETURN(received, Receive(handle, tensor, name));
        }
        RETURN_IF_ERROR(Synchronize());
        const int64_t elapsed = NanosSince(start);
        RETURN_IF_ERROR(Fetch(received, tensor));
        RETURN_IF_ERROR(Verify(pattern, received, i, name));
        if (i >= warmup) nanos.push_back(elapsed);
      }
      Emit(name, nanos, warmup + timed);
    }
    return absl::OkStatus();
  }

  // One data-parallel step: every gradient submitted as the backward pass
  // would, then all of them waited for; views are held to the end of the
  // step, as an optimizer reading them would.
  absl::Status Resnet() {
    ASSIGN_OR_RETURN(const auto workload, examples::LoadWorkload(options_.workload));
    std::vector<Pattern> patterns;
    std::vector<PlacedTensor> tensors;
    for (const auto& gradient : workload) {
      patterns.push_back(
          MakePattern(Collective::kAllreduce, static_cast<size_t>(gradient.elements)));
      ASSIGN_OR_RETURN(PlacedTensor tensor, Place(patterns.back()));
      tensors.push_back(std::move(tensor));
    }
    const int warmup = options_.untimed_steps + WarmupIterations(options_.steps);
    std::vector<int64_t> nanos;
    std::vector<Client::Handle> handles(workload.size());
    std::vector<Received> results(workload.size());
    for (int step = 0; step < warmup + options_.steps; ++step) {
      for (size_t t = 0; t < tensors.size(); ++t) {
        patterns[t].Prepare(tensors[t].mutable_data(), step);
        RETURN_IF_ERROR(tensors[t].Publish());
      }
      RETURN_IF_ERROR(Synchronize());
      RETURN_IF_ERROR(Barrier());
      const auto start = Clock::now();
      for (size_t t = 0; t < workload.size(); ++t) {
        ASSIGN_OR_RETURN(handles[t], Submit(Collective::kAllreduce, workload[t].name, tensors[t],
                                            workload[t].shape));
      }
      for (size_t t = 0; t < workload.size(); ++t) {
        ASSIGN_OR_RETURN(results[t], Receive(handles[t], tensors[t], workload[t].name));
      }
      RETURN_IF_ERROR(Synchronize());
      const int64_t elapsed = NanosSince(start);
      for (size_t t = 0; t < workload.size(); ++t) {
        RETURN_IF_ERROR(Fetch(results[t], tensors[t]));
        RETURN_IF_ERROR(Verify(patterns[t], results[t], step, workload[t].name));
      }
      for (Received& received : results) received.result.Release();
      if (step >= warmup) nanos.push_back(elapsed);
    }
    Emit(kResnetKey, nanos,
         static_cast<int64_t>(warmup + options_.steps) * static_cast<int64_t>(workload.size()));
    return absl::OkStatus();
  }

  // Back to back: each allreduce already waits for every rank.
  absl::Status Latency() {
    const Pattern pattern = MakePattern(Collective::kAllreduce, 1);
    ASSIGN_OR_RETURN(PlacedTensor tensor, Place(pattern));
    const std::vector<int64_t> shape = {1};
    const int warmup = WarmupIterations(options_.latency_iterations);
    std::vector<int64_t> nanos;
    nanos.reserve(static_cast<size_t>(options_.latency_iterations));
    for (int i = 0; i < warmup + options_.latency_iterations; ++i) {
      pattern.Prepare(tensor.mutable_data(), i);
      RETURN_IF_ERROR(tensor.Publish());
      RETURN_IF_ERROR(Synchronize());  // the upload of a CUDA input is not the allreduce's
      const auto start = Clock::now();
      ASSIGN_OR_RETURN(const Client::Handle handle,
                       Submit(Collective::kAllreduce, kLatencyKey, tensor, shape));
      ASSIGN_OR_RETURN(Received received, Receive(handle, tensor, kLatencyKey));
      RETURN_IF_ERROR(Synchronize());
      const int64_t elapsed = NanosSince(start);
      RETURN_IF_ERROR(Fetch(received, tensor));
      RETURN_IF_ERROR(Verify(pattern, received, i, kLatencyKey));
      if (i >= warmup) nanos.push_back(elapsed);
    }
    Emit(kLatencyKey, nanos, warmup + options_.latency_iterations);
    return absl::OkStatus();
  }

  Client& client_;
  const BenchOptions& options_;
  const Placement placement_;
  DeviceMemory* device_;  // CUDA placement only
  float barrier_ = 0;
  int64_t checked_ = 0;  // results of the current series
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
  std::unique_ptr<DeviceMemory> device;
  if (options.placements.front() == Placement::kCuda) {
    auto opened = DeviceMemory::Open((*client)->local_rank());
    if (!opened.ok()) {
      std::fprintf(stderr, "collective-bench: client worker %d: %s\n", options.rank,
                   opened.status().ToString().c_str());
      return 1;
    }
    device = std::move(*opened);
  }
  // Daemons that did not form one job across the nodes would each run a
  // smaller one, whose results would pass the checks made for its size.
  absl::Status status = absl::OkStatus();
  if ((*client)->size() != options.ranks() || (*client)->rank() != options.rank) {
    status = absl::FailedPreconditionError(
        absl::StrCat("the daemon made this client rank ", (*client)->rank(), " of ",
                     (*client)->size(), "; expected rank ", options.rank, " of ", options.ranks(),
                     " (", options.nodes, " nodes x ", options.clients, " clients)"));
  }
  ClientBench bench(**client, options, device.get());
  if (status.ok()) status = bench.Run(options.modes.front());
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
