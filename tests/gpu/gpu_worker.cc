// One rank of a GPU test job (collective-gpu-worker SCENARIO): picks a CUDA
// device (local rank modulo the devices, so that several ranks share one),
// connects to the daemon, and runs the scenario with tensors in device
// memory, checking every result against a host reference computed from the
// data every rank can regenerate. Exit 0 on success; otherwise the reason on
// stderr.
//
//   matrix  every collective and point-to-point messages; allreduce on every
//           dtype and op, in and out of place, with and without scale
//           factors; reduce, gather and scatter from every root
//   fusion  many small allreduces submitted before any is waited for
//   kill    one successful allreduce; then the last rank dies (SIGKILL)
//           mid-operation and the others must see the job fail
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collective/client.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "daemon/exec/reduce_kernels.h"
#include "tests/common/reference_reduce.h"

namespace collective::gpu_test {
namespace {

using testing::CompareBitwise;
using testing::CompareClose;
using testing::FillTestData;
using testing::ReferenceReduce;

absl::Status Cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

// Device memory freed when it goes.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&data_, bytes == 0 ? 1 : bytes) != cudaSuccess) data_ = nullptr;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

class Worker {
 public:
  Worker(Client& client, cudaStream_t stream) : client_(client), stream_(stream) {}

  absl::Status Matrix() {
    RETURN_IF_ERROR(Allreduces());
    RETURN_IF_ERROR(Broadcasts());
    RETURN_IF_ERROR(Allgather());
    RETURN_IF_ERROR(Alltoall());
    RETURN_IF_ERROR(Reducescatter());
    RETURN_IF_ERROR(Rooted());
    return Messages();
  }

  absl::Status Fusion() {
    // 64 tensors of 1..64 Ki floats; every one submitted, then every one
    // waited for.
    constexpr int kTensors = 64;
    std::vector<std::unique_ptr<DeviceBuffer>> buffers;
    std::vector<Client::Handle> handles;
    std::vector<size_t> counts;
    for (int t = 0; t < kTensors; ++t) {
      counts.push_back(static_cast<size_t>(1 + (t * 997) % 65536));
      buffers.push_back(std::make_unique<DeviceBuffer>(counts.back() * sizeof(float)));
      std::vector<float> host(counts.back(), static_cast<float>(rank() + t));
      RETURN_IF_ERROR(
          Cuda(cudaMemcpyAsync(buffers.back()->data(), host.data(), buffers.back()->bytes(),
                               cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync"));
      auto handle = client_.AllreduceAsync(
          absl::StrCat("fused.", t),
          OnDevice(*buffers.back(), DataType::kFloat32, {static_cast<int64_t>(counts.back())}),
          nullptr, {.op = ReduceOp::kSum});
      if (!handle.ok()) return handle.status();
      handles.push_back(*handle);
    }
    for (int t = 0; t < kTensors; ++t) {
      RETURN_IF_ERROR(client_.Wait(handles[t]).status());
      std::vector<float> host(counts[t]);
      RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(host.data(), buffers[t]->data(), buffers[t]->bytes(),
                                           cudaMemcpyDeviceToHost, stream_),
                           "cudaMemcpyAsync"));
      RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
      const float expected = static_cast<float>(size() * (size() - 1) / 2 + size() * t);
      for (size_t i = 0; i < counts[t]; ++i) {
        if (host[i] != expected) {
          return absl::DataLossError(absl::StrCat("fused tensor ", t, " element ", i, " is ",
                                                  host[i], ", not ", expected));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status Kill() {
    DeviceBuffer buffer(1024 * sizeof(float));
    RETURN_IF_ERROR(
        Cuda(cudaMemsetAsync(buffer.data(), 0, buffer.bytes(), stream_), "cudaMemsetAsync"));
    const TensorView tensor = OnDevice(buffer, DataType::kFloat32, {1024});
    RETURN_IF_ERROR(client_.Allreduce("before", tensor, nullptr));
    // The last rank dies before it submits "during", its mapping and events
    // from "before" still open, while the others wait in "during". (Dying
    // just after submitting would race: a submission the daemon already has
    // may legitimately complete.)
    if (rank() == size() - 1) std::raise(SIGKILL);
    auto handle = client_.AllreduceAsync("during", tensor, nullptr);
    if (!handle.ok()) return handle.status();
    const auto result = client_.Wait(*handle, absl::Seconds(120));
    if (result.ok()) {
      return absl::InternalError("the allreduce completed although a rank died");
    }
    std::fprintf(stderr, "rank %d saw: %s\n", rank(), result.status().ToString().c_str());
    if (absl::IsDeadlineExceeded(result.status())) return result.status();
    return absl::OkStatus();
  }

 private:
  int rank() const { return client_.rank(); }
  int size() const { return client_.size(); }

  TensorView OnDevice(const DeviceBuffer& buffer, DataType dtype,
                      std::vector<int64_t> shape) const {
    return TensorView{.data = buffer.data(),
                      .dtype = dtype,
                      .shape = std::move(shape),
                      .device = collective::Device::kCuda,
                      .cuda_stream = stream_};
  }

  absl::Status Upload(const DeviceBuffer& buffer, const void* host, size_t bytes) {
    return Cuda(cudaMemcpyAsync(buffer.data(), host, bytes, cudaMemcpyHostToDevice, stream_),
                "cudaMemcpyAsync to the device");
  }

  absl::StatusOr<Result> WaitFor(absl::StatusOr<Client::Handle> handle) {
    if (!handle.ok()) return handle.status();
    return client_.Wait(*handle);
  }

  // The result, once the stream (which waits for the daemon) got there.
  absl::StatusOr<std::vector<std::byte>> Download(const DeviceBuffer& buffer, size_t bytes) {
    std::vector<std::byte> host(bytes);
    RETURN_IF_ERROR(
        Cuda(cudaMemcpyAsync(host.data(), buffer.data(), bytes, cudaMemcpyDeviceToHost, stream_),
             "cudaMemcpyAsync to the host"));
    RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
    return host;
  }

  absl::Status Allreduces() {
    constexpr size_t kCount = 1031;
    const v1::DataType types[] = {
        v1::DATA_TYPE_UINT8,   v1::DATA_TYPE_INT8,    v1::DATA_TYPE_INT32,
        v1::DATA_TYPE_INT64,   v1::DATA_TYPE_FLOAT16, v1::DATA_TYPE_BFLOAT16,
        v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_FLOAT64, v1::DATA_TYPE_BOOL};
    const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};
    int index = 0;
    for (v1::DataType dtype : types) {
      for (ReduceOp op : ops) {
        const v1::ReduceOp wire = static_cast<v1::ReduceOp>(op);
        const v1::ReduceOp kernel_op = op == ReduceOp::kAverage ? v1::REDUCE_OP_SUM : wire;
        if (!daemon::exec::IsReducible(dtype, kernel_op)) continue;
        for (const bool in_place : {false, true}) {
          const double postscale = in_place && dtype != v1::DATA_TYPE_BOOL ? 2.0 : 1.0;
          const size_t bytes = kCount * ElementSize(dtype);
          std::vector<std::vector<std::byte>> inputs(static_cast<size_t>(size()),
                                                     std::vector<std::byte>(bytes));
          for (int r = 0; r < size(); ++r) {
            FillTestData(dtype, kernel_op, static_cast<uint64_t>(r + 1), inputs[r].data(), kCount);
          }
          DeviceBuffer input(bytes);
          DeviceBuffer output(bytes);
          RETURN_IF_ERROR(Upload(input, inputs[rank()].data(), bytes));
          const std::string name = absl::StrCat("allreduce.", index++);
          RETURN_IF_ERROR(client_.Allreduce(
              name, OnDevice(input, static_cast<DataType>(dtype), {static_cast<int64_t>(kCount)}),
              in_place ? nullptr : output.data(), {.op = op, .postscale = postscale}));
          auto result = Download(in_place ? input : output, bytes);
          if (!result.ok()) return result.status();
          std::vector<const void*> sources;
          for (const auto& data : inputs) sources.push_back(data.data());
          std::vector<std::byte> expected(bytes);
          ReferenceReduce({.dtype = dtype,
                           .op = kernel_op,
                           .postscale = postscale,
                           .divisor = op == ReduceOp::kAverage ? size() : 1},
                          sources, expected.data(), kCount);
          if (std::string diff = CompareClose(dtype, expected.data(), result->data(), kCount);
              !diff.empty()) {
            return absl::DataLossError(absl::StrCat(name, " (", DataTypeName(dtype), " ",
                                                    ReduceOpName(wire), "): ", diff));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status Broadcasts() {
    for (int root = 0; root < size(); ++root) {
      std::vector<double> host(333);
      for (size_t i = 0; i < host.size(); ++i) host[i] = 1000.0 * rank() + static_cast<double>(i);
      DeviceBuffer buffer(host.size() * sizeof(double));
      RETURN_IF_ERROR(Upload(buffer, host.data(), buffer.bytes()));
      auto handle =
          client_.BroadcastAsync(absl::StrCat("broadcast.", root),
                                 OnDevice(buffer, DataType::kFloat64, {333}), nullptr, root);
      if (!handle.ok()) return handle.status();
      RETURN_IF_ERROR(client_.Wait(*handle).status());
      auto result = Download(buffer, buffer.bytes());
      if (!result.ok()) return result.status();
      const auto* values = reinterpret_cast<const double*>(result->data());
      for (size_t i = 0; i < host.size(); ++i) {
        if (values[i] != 1000.0 * root + static_cast<double>(i)) {
          return absl::DataLossError(absl::StrCat("broadcast from ", root, " element ", i));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status Allgather() {
    // Rank r: r + 1 rows of 5 int32.
    std::vector<int32_t> mine(static_cast<size_t>(5 * (rank() + 1)));
    std::iota(mine.begin(), mine.end(), 100 * rank());
    std::vector<int32_t> expected;
    for (int r = 0; r < size(); ++r) {
      for (int i = 0; i < 5 * (r + 1); ++i) expected.push_back(100 * r + i);
    }
    DeviceBuffer input(mine.size() * sizeof(int32_t));
    DeviceBuffer output(expected.size() * sizeof(int32_t));
    RETURN_IF_ERROR(Upload(input, mine.data(), input.bytes()));
    auto handle =
        client_.AllgatherAsync("allgather", OnDevice(input, DataType::kInt32, {rank() + 1, 5}),
                               output.data(), output.bytes());
    if (!handle.ok()) return handle.status();
    auto waited = client_.Wait(*handle);
    if (!waited.ok()) return waited.status();
    if (waited->shape().front() != size() * (size() + 1) / 2) {
      return absl::DataLossError("allgather's first dimension");
    }
    auto result = Download(output, output.bytes());
    if (!result.ok()) return result.status();
    if (std::string diff =
            CompareBitwise(v1::DATA_TYPE_INT32, expected.data(), result->data(), expected.size());
        !diff.empty()) {
      return absl::DataLossError(absl::StrCat("allgather: ", diff));
    }
    return absl::OkStatus();
  }

  absl::Status Alltoall() {
    // Rank r sends (r + j) % 3 rows of 2 floats to rank j.
    const auto split = [](int r, int j) { return static_cast<int64_t>((r + j) % 3); };
    std::vector<int64_t> splits;
    std::vector<float> mine;
    for (int j = 0; j < size(); ++j) {
      splits.push_back(split(rank(), j));
      for (int64_t row = 0; row < split(rank(), j); ++row) {
        mine.push_back(static_cast<float>(100 * rank() + 10 * j + row));
        mine.push_back(-static_cast<float>(100 * rank() + 10 * j + row));
      }
    }
    std::vector<float> expected;
    for (int s = 0; s < size(); ++s) {
      for (int64_t row = 0; row < split(s, rank()); ++row) {
        expected.push_back(static_cast<float>(100 * s + 10 * rank() + row));
        expected.push_back(-static_cast<float>(100 * s + 10 * rank() + row));
      }
    }
    DeviceBuffer input(mine.size() * sizeof(float));
    DeviceBuffer output(expected.size() * sizeof(float));
    RETURN_IF_ERROR(Upload(input, mine.data(), input.bytes()));
    auto handle = client_.AlltoallAsync(
        "alltoall", OnDevice(input, DataType::kFloat32, {static_cast<int64_t>(mine.size() / 2), 2}),
        splits, output.data(), output.bytes());
    if (!handle.ok()) return handle.status();
    auto waited = client_.Wait(*handle);
    if (!waited.ok()) return waited.status();
    for (int s = 0; s < size(); ++s) {
      if (waited->received_splits()[static_cast<size_t>(s)] != split(s, rank())) {
        return absl::DataLossError("alltoall's received splits");
      }
    }
    auto result = Download(output, output.bytes());
    if (!result.ok()) return result.status();
    if (std::string diff =
            CompareBitwise(v1::DATA_TYPE_FLOAT32, expected.data(), result->data(), expected.size());
        !diff.empty()) {
      return absl::DataLossError(absl::StrCat("alltoall: ", diff));
    }
    return absl::OkStatus();
  }

  absl::Status Reducescatter() {
    // 2K + 1 rows of 3 floats; rank r's element i is (r + 1) * i.
    const int64_t rows = 2 * size() + 1;
    std::vector<float> mine(static_cast<size_t>(rows * 3));
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>((rank() + 1) * i);
    const int64_t base = rows / size();
    const int64_t extra = rows % size();
    const int64_t my_rows = base + (rank() < extra ? 1 : 0);
    const int64_t first = rank() * base + std::min<int64_t>(rank(), extra);
    DeviceBuffer input(mine.size() * sizeof(float));
    DeviceBuffer output(static_cast<size_t>(my_rows * 3) * sizeof(float));
    RETURN_IF_ERROR(Upload(input, mine.data(), input.bytes()));
    auto handle =
        client_.ReducescatterAsync("reducescatter", OnDevice(input, DataType::kFloat32, {rows, 3}),
                                   output.data(), {.op = ReduceOp::kAverage});
    if (!handle.ok()) return handle.status();
    RETURN_IF_ERROR(client_.Wait(*handle).status());
    auto result = Download(output, output.bytes());
    if (!result.ok()) return result.status();
    const auto* values = reinterpret_cast<const float*>(result->data());
    const float ranks = static_cast<float>(size() * (size() + 1) / 2);
    for (int64_t i = 0; i < my_rows * 3; ++i) {
      const float expected = ranks * static_cast<float>(first * 3 + i) * (1.0f / size());
      if (values[i] != expected) {
        return absl::DataLossError(
            absl::StrCat("reducescatter element ", i, " is ", values[i], ", not ", expected));
      }
    }
    return absl::OkStatus();
  }

  // Reduce (sum, in place and not), gather of uneven rows and scatter, each
  // from every root; ranks that receive nothing keep their memory.
  absl::Status Rooted() {
    constexpr float kUntouched = -7.0f;
    const auto check = [](const std::string& what, const std::vector<float>& expected,
                          const std::vector<std::byte>& got) -> absl::Status {
      if (std::string diff =
              CompareBitwise(v1::DATA_TYPE_FLOAT32, expected.data(), got.data(), expected.size());
          !diff.empty()) {
        return absl::DataLossError(absl::StrCat(what, ": ", diff));
      }
      return absl::OkStatus();
    };
    const auto filled = [this](size_t count, auto value) -> absl::StatusOr<DeviceBuffer*> {
      std::vector<float> host(count);
      for (size_t i = 0; i < count; ++i) host[i] = value(i);
      buffers_.push_back(std::make_unique<DeviceBuffer>(count * sizeof(float)));
      RETURN_IF_ERROR(Upload(*buffers_.back(), host.data(), buffers_.back()->bytes()));
      return buffers_.back().get();
    };
    const size_t k = static_cast<size_t>(size());
    const size_t me = static_cast<size_t>(rank());
    for (int root = 0; root < size(); ++root) {
      const bool is_root = rank() == root;
      for (const bool in_place : {false, true}) {
        // Reduce: 257 floats, rank r's element i is (r + 1) i.
        constexpr size_t kCount = 257;
        ASSIGN_OR_RETURN(DeviceBuffer * input, filled(kCount, [me](size_t i) {
                           return static_cast<float>((me + 1) * i);
                         }));
        // A rank that receives nothing may hand an output too small for the
        // result (its output is not used).
        const size_t output_count = is_root ? kCount : 1;
        ASSIGN_OR_RETURN(DeviceBuffer * output,
                         filled(output_count, [](size_t) { return kUntouched; }));
        const std::string name = absl::StrCat("reduce.", root, in_place ? ".in_place" : "");
        RETURN_IF_ERROR(
            WaitFor(client_.ReduceAsync(name, OnDevice(*input, DataType::kFloat32, {kCount}),
                                        in_place ? nullptr : output->data(), root))
                .status());
        const size_t read = in_place ? kCount : output_count;
        ASSIGN_OR_RETURN(std::vector<std::byte> got,
                         Download(in_place ? *input : *output, read * sizeof(float)));
        std::vector<float> expected(read);
        for (size_t i = 0; i < read; ++i) {
          expected[i] = is_root    ? static_cast<float>(k * (k + 1) / 2 * i)
                        : in_place ? static_cast<float>((me + 1) * i)
                                   : kUntouched;
        }
        RETURN_IF_ERROR(check(name, expected, got));
      }
      // Gather: rank r sends r + 1 rows of 4 floats, 100 r + i.
      size_t total = 0;
      std::vector<float> gathered;
      for (size_t r = 0; r < k; ++r) {
        for (size_t i = 0; i < 4 * (r + 1); ++i)
          gathered.push_back(static_cast<float>(100 * r + i));
      }
      total = gathered.size();
      ASSIGN_OR_RETURN(DeviceBuffer * rows, filled(4 * (me + 1), [me](size_t i) {
                         return static_cast<float>(100 * me + i);
                       }));
      ASSIGN_OR_RETURN(DeviceBuffer * all, filled(total, [](size_t) { return kUntouched; }));
      const std::string gather = absl::StrCat("gather.", root);
      auto gather_result = WaitFor(client_.GatherAsync(
          gather, OnDevice(*rows, DataType::kFloat32, {static_cast<int64_t>(me + 1), 4}), root,
          kGlobalProcessSet, all->data(), all->bytes()));
      if (!gather_result.ok()) return gather_result.status();
      if (is_root && gather_result->shape().front() != static_cast<int64_t>(k * (k + 1) / 2)) {
        return absl::DataLossError(absl::StrCat(gather, ": the root's first dimension is ",
                                                gather_result->shape().front()));
      }
      ASSIGN_OR_RETURN(std::vector<std::byte> got_all, Download(*all, all->bytes()));
      if (!is_root) std::fill(gathered.begin(), gathered.end(), kUntouched);
      RETURN_IF_ERROR(check(gather, gathered, got_all));
      // Scatter: the root's row j holds 10 j; rank r receives r + 1 rows of 4.
      const size_t root_rows = is_root ? k * (k + 1) / 2 : 0;
      ASSIGN_OR_RETURN(DeviceBuffer * source,
                       filled(std::max<size_t>(4 * root_rows, 1),
                              [](size_t i) { return static_cast<float>(10 * (i / 4)); }));
      ASSIGN_OR_RETURN(DeviceBuffer * mine,
                       filled(4 * (me + 1), [](size_t) { return kUntouched; }));
      const std::string scatter = absl::StrCat("scatter.", root);
      RETURN_IF_ERROR(WaitFor(client_.ScatterAsync(scatter,
                                                   OnDevice(*source, DataType::kFloat32,
                                                            {static_cast<int64_t>(root_rows), 4}),
                                                   static_cast<int64_t>(me + 1), root,
                                                   kGlobalProcessSet, mine->data(), mine->bytes()))
                          .status());
      ASSIGN_OR_RETURN(std::vector<std::byte> got_mine, Download(*mine, mine->bytes()));
      const size_t first = me * (me + 1) / 2;
      std::vector<float> expected_mine(4 * (me + 1));
      for (size_t i = 0; i < expected_mine.size(); ++i) {
        expected_mine[i] = static_cast<float>(10 * (first + i / 4));
      }
      RETURN_IF_ERROR(check(scatter, expected_mine, got_mine));
    }
    buffers_.clear();
    return absl::OkStatus();
  }

  // A ring (each rank sends to the next, tags 1 and 2 in that order, both
  // received in the opposite order) and a send to itself.
  absl::Status Messages() {
    constexpr size_t kCount = 1000;
    const int next = (rank() + 1) % size();
    const int previous = (rank() + size() - 1) % size();
    std::vector<std::unique_ptr<DeviceBuffer>> sent;
    std::vector<Client::Handle> sends;
    for (int tag : {1, 2, 3}) {
      std::vector<double> host(kCount);
      for (size_t i = 0; i < kCount; ++i) host[i] = 1e6 * tag + 1000.0 * rank() + i;
      sent.push_back(std::make_unique<DeviceBuffer>(kCount * sizeof(double)));
      RETURN_IF_ERROR(Upload(*sent.back(), host.data(), sent.back()->bytes()));
      auto handle = client_.SendAsync(OnDevice(*sent.back(), DataType::kFloat64, {kCount}),
                                      tag == 3 ? rank() : next, tag);
      if (!handle.ok()) return handle.status();
      sends.push_back(*handle);
    }
    for (int tag : {3, 2, 1}) {
      const int source = tag == 3 ? rank() : previous;
      DeviceBuffer received(kCount * sizeof(double));
      auto result = client_.Wait(
          *client_.RecvAsync(OnDevice(received, DataType::kFloat64, {kCount}), source, tag));
      if (!result.ok()) return result.status();
      ASSIGN_OR_RETURN(std::vector<std::byte> got, Download(received, received.bytes()));
      const auto* values = reinterpret_cast<const double*>(got.data());
      for (size_t i = 0; i < kCount; ++i) {
        if (values[i] != 1e6 * tag + 1000.0 * source + i) {
          return absl::DataLossError(absl::StrCat("message with tag ", tag, " from rank ", source,
                                                  ": element ", i, " is ", values[i]));
        }
      }
    }
    for (Client::Handle handle : sends) RETURN_IF_ERROR(client_.Wait(handle).status());
    return absl::OkStatus();
  }

  Client& client_;
  cudaStream_t stream_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
};

int Run(const std::string& scenario) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "collective-gpu-worker: no CUDA device\n");
    return 2;
  }
  auto client = Client::Connect();
  if (!client.ok()) {
    std::fprintf(stderr, "collective-gpu-worker: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const int device = (*client)->local_rank() % devices;
  cudaStream_t stream = nullptr;
  if (cudaSetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess ||
      cudaStreamCreate(&stream) != cudaSuccess) {
    std::fprintf(stderr, "collective-gpu-worker: cannot use CUDA device %d\n", device);
    return 2;
  }
  Worker worker(**client, stream);
  absl::Status status = absl::InvalidArgumentError("unknown scenario " + scenario);
  if (scenario == "matrix") status = worker.Matrix();
  if (scenario == "fusion") status = worker.Fusion();
  if (scenario == "kill") status = worker.Kill();
  if (status.ok() && scenario != "kill") status = (*client)->Close();
  if (!status.ok()) {
    std::fprintf(stderr, "collective-gpu-worker %s, rank %d: %s\n", scenario.c_str(),
                 (*client)->rank(), status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace collective::gpu_test

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: collective-gpu-worker matrix|fusion|kill\n");
    return 2;
  }
  return collective::gpu_test::Run(argv[1]);
}
