// A trainer that exchanges ResNet-50's gradients through collectived, the way
// a data-parallel training step does: every rank fills its gradients, all of
// them are averaged across ranks (asynchronously, as a backward pass would
// submit them), and every rank checks the averages it received.
//
// Started once per rank by a launcher (scripts/demo.sh, mpirun, torchrun...),
// which sets LOCAL_RANK / LOCAL_SIZE (or OMPI_COMM_WORLD_LOCAL_*) and, for a
// private daemon, COLLECTIVE_SOCKET.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "collective/client.h"
#include "examples/workload.h"

namespace {

// The gradient of rank r at element i: easy to average exactly in float32.
float Gradient(int rank, int64_t i) { return static_cast<float>((rank + 1) * (i % 7 + 1)) / 8; }

}  // namespace

int main(int argc, char** argv) {
  const std::string workload_path =
      argc > 1 ? argv[1] : "tests/bench/workloads/resnet50_gradients.txt";
  const int steps = argc > 2 ? std::stoi(argv[2]) : 10;
  auto workload = collective::examples::LoadWorkload(workload_path);
  if (!workload.ok()) {
    std::fprintf(stderr, "demo-trainer: %s\n", std::string(workload.status().message()).c_str());
    return 2;
  }
  auto connected = collective::Client::Connect();
  if (!connected.ok()) {
    std::fprintf(stderr, "demo-trainer: %s\n", std::string(connected.status().message()).c_str());
    return 1;
  }
  collective::Client& client = **connected;
  const int rank = client.rank();
  const int size = client.size();

  // Gradients live in the client's shared-memory arena: the daemon reads
  // them where they are (zero-copy), and each rank reads the averages from
  // the daemon's result segment.
  std::vector<collective::Buffer> gradients;
  int64_t total_elements = 0;
  for (const auto& tensor : *workload) {
    auto buffer = client.Allocate(tensor.elements * sizeof(float));
    if (!buffer.ok()) {
      std::fprintf(stderr, "demo-trainer: %s\n", std::string(buffer.status().message()).c_str());
      return 1;
    }
    gradients.push_back(std::move(*buffer));
    total_elements += tensor.elements;
  }
  const double bytes = static_cast<double>(total_elements) * sizeof(float);

  std::vector<double> step_ms;
  int64_t checked = 0;
  for (int step = 0; step < steps + 1; ++step) {  // step 0 warms up
    for (size_t t = 0; t < workload->size(); ++t) {
      auto* values = static_cast<float*>(gradients[t].data());
      for (int64_t i = 0; i < (*workload)[t].elements; ++i) values[i] = Gradient(rank, i + step);
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<collective::Client::Handle> handles;
    for (size_t t = 0; t < workload->size(); ++t) {
      const auto& tensor = (*workload)[t];
      auto handle = client.AllreduceAsync(
          tensor.name, {gradients[t].data(), collective::DataType::kFloat32, tensor.shape},
          /*output=*/nullptr, {.op = collective::ReduceOp::kAverage});
      if (!handle.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, std::string(handle.status().message()).c_str());
        return 1;
      }
      handles.push_back(*handle);
    }
    for (size_t t = 0; t < handles.size(); ++t) {
      auto result = client.Wait(handles[t]);
      if (!result.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, std::string(result.status().message()).c_str());
        return 1;
      }
      // Average over ranks of (r + 1) * k / 8 is (size + 1) / 2 * k / 8.
      const auto* averaged = static_cast<const float*>(result->data());
      const int64_t elements = (*workload)[t].elements;
      for (int64_t i = 0; i < elements; i += std::max<int64_t>(1, elements / 64)) {
        const float expected = static_cast<float>((size + 1) * ((i + step) % 7 + 1)) / 16;
        if (averaged[i] != expected) {
          std::fprintf(stderr, "rank %d: %s[%lld] = %g, expected %g\n", rank,
                       (*workload)[t].name.c_str(), static_cast<long long>(i), averaged[i],
                       expected);
          return 1;
        }
        ++checked;
      }
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (step > 0) step_ms.push_back(ms);
  }
  std::sort(step_ms.begin(), step_ms.end());
  const double median = step_ms[step_ms.size() / 2];
  if (rank == 0) {
    std::printf(
        "demo: %d ranks averaged %zu ResNet-50 gradient tensors (%.1f MB) per step, %d steps\n",
        size, workload->size(), bytes / 1e6, steps);
    std::printf("demo: median step %.1f ms (min %.1f, max %.1f), %.2f GB/s per rank\n", median,
                step_ms.front(), step_ms.back(), bytes / 1e6 / median);
  }
  std::printf("demo: rank %d checked %lld averaged values: all correct\n", rank,
              static_cast<long long>(checked));
  return 0;
}
