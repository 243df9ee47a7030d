// Throughput of exec::Reduce. Bytes processed count the memory traffic floor
// of the reduction, (k + 1) * n for k inputs and an output of n bytes, so that
// the GB/s column reads directly against the memcpy baseline, which moves the
// same (k + 1) * n bytes (half read, half written).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include "common/dtype.h"
#include "daemon/exec/reduce_kernels.h"
#include "tests/common/reference_reduce.h"

namespace collective::daemon::exec {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

struct Scale {
  double prescale = 1.0;
  double postscale = 1.0;
  int64_t divisor = 1;
};

// n_bytes is the size of each input and of the output.
void BM_Reduce(benchmark::State& state, v1::DataType dtype, size_t k, size_t n_bytes, Scale scale) {
  const exec::ReduceSpec spec{dtype, v1::REDUCE_OP_SUM, scale.prescale, scale.postscale,
                              scale.divisor};
  const size_t count = n_bytes / ElementSize(dtype);
  std::vector<std::vector<char>> buffers(k, std::vector<char>(n_bytes));
  std::vector<const void*> inputs;
  for (size_t j = 0; j < k; ++j) {
    testing::FillTestData(dtype, spec.op, j, buffers[j].data(), count);
    inputs.push_back(buffers[j].data());
  }
  std::vector<char> out(n_bytes);
  for (auto _ : state) {
    exec::Reduce(spec, inputs, out.data(), count);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * (k + 1) * n_bytes));
}

void BM_Memcpy(benchmark::State& state, size_t k, size_t n_bytes) {
  const size_t copy_bytes = (k + 1) * n_bytes / 2;
  std::vector<char> source(copy_bytes, 1);
  std::vector<char> destination(copy_bytes, 2);
  for (auto _ : state) {
    std::memcpy(destination.data(), source.data(), copy_bytes);
    benchmark::DoNotOptimize(destination.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * (k + 1) * n_bytes));
}

constexpr v1::DataType kF16 = v1::DATA_TYPE_FLOAT16;
constexpr v1::DataType kBF16 = v1::DATA_TYPE_BFLOAT16;
constexpr v1::DataType kF32 = v1::DATA_TYPE_FLOAT32;
constexpr v1::DataType kF64 = v1::DATA_TYPE_FLOAT64;
constexpr v1::DataType kI32 = v1::DATA_TYPE_INT32;

BENCHMARK_CAPTURE(BM_Reduce, f32_sum_k4_4KiB, kF32, 4, 4 * kKiB, Scale{});
BENCHMARK_CAPTURE(BM_Memcpy, same_traffic_k4_4KiB, 4, 4 * kKiB);
BENCHMARK_CAPTURE(BM_Reduce, f32_sum_k4_1MiB, kF32, 4, kMiB, Scale{});
BENCHMARK_CAPTURE(BM_Memcpy, same_traffic_k4_1MiB, 4, kMiB);
BENCHMARK_CAPTURE(BM_Reduce, f32_sum_k4_64MiB, kF32, 4, 64 * kMiB, Scale{});
BENCHMARK_CAPTURE(BM_Memcpy, same_traffic_k4_64MiB, 4, 64 * kMiB);
BENCHMARK_CAPTURE(BM_Reduce, f32_sum_k2_64MiB, kF32, 2, 64 * kMiB, Scale{});
BENCHMARK_CAPTURE(BM_Memcpy, same_traffic_k2_64MiB, 2, 64 * kMiB);
BENCHMARK_CAPTURE(BM_Reduce, f32_sum_k8_64MiB, kF32, 8, 64 * kMiB, Scale{});
BENCHMARK_CAPTURE(BM_Memcpy, same_traffic_k8_64MiB, 8, 64 * kMiB);
BENCHMARK_CAPTURE(BM_Reduce, f32_sum_scaled_k4_64MiB, kF32, 4, 64 * kMiB, Scale{0.5, 3.0, 4});
BENCHMARK_CAPTURE(BM_Reduce, f32_average_k4_64MiB, kF32, 4, 64 * kMiB, Scale{1.0, 1.0, 4});
BENCHMARK_CAPTURE(BM_Reduce, f16_sum_k4_64MiB, kF16, 4, 64 * kMiB, Scale{});
BENCHMARK_CAPTURE(BM_Reduce, bf16_sum_k4_64MiB, kBF16, 4, 64 * kMiB, Scale{});
BENCHMARK_CAPTURE(BM_Reduce, f64_sum_k4_64MiB, kF64, 4, 64 * kMiB, Scale{});
BENCHMARK_CAPTURE(BM_Reduce, i32_sum_k4_64MiB, kI32, 4, 64 * kMiB, Scale{});
BENCHMARK_CAPTURE(BM_Reduce, f16_sum_k4_1MiB, kF16, 4, kMiB, Scale{});
BENCHMARK_CAPTURE(BM_Reduce, bf16_sum_k4_1MiB, kBF16, 4, kMiB, Scale{});

}  // namespace
}  // namespace collective::daemon::exec

BENCHMARK_MAIN();
